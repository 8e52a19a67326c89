"""Kubernetes discovery: the engine pods of a label selector, listed once and watched
(`discovery`), read through the API server's pod proxy with the kubeconfig's credentials
(`proxy`); the Kubernetes client is used in `client` only."""
