"""kubectl gpuval: gpuval's verdicts seen from a kubeconfig, as kubectl's plugin (kubectl-gpuval).

    kubectl gpuval status              every GpuValidation, one line each
    kubectl gpuval status NAME         its run, failing nodes with reason and hint, and outliers
    kubectl gpuval report NAME --html FILE   a self-contained HTML page with plots (report extra)
    kubectl gpuval evidence NODE       a failing node's evidence bundle into a .json.gz file

Its own small package: gpuval-api (the types and the views a person sees), the `kubernetes` client
(credentials and API calls) and, as the `report` extra, gpuval-report; not the operator.
"""
