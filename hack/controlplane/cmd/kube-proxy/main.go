// Command kube-proxy runs the upstream kube-proxy from k8s.io/kubernetes unchanged, so Service
// addresses work on the real node of gpuval's test cluster as they do in a cluster (the chart's
// `helm test` pod reaches the operator through its metrics Service).
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
