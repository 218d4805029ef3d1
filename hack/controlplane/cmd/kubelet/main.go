// Command kubelet runs the upstream kubelet from k8s.io/kubernetes unchanged, for the one real
// node of gpuval's test cluster (gpuval_devtools.realnode): no Kubernetes binary can be
// downloaded here, so it is compiled from the same Go module as the control plane.
package main

import (
	"context"
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
