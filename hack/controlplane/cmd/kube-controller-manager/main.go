// Command kube-controller-manager runs the upstream kube-controller-manager from k8s.io/kubernetes unchanged.
// It exists because no Kubernetes binary can be downloaded here: the control
// plane for gpuval's tests is compiled from Go modules instead.
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
