// Package deploy holds shardcache's deployment files: Kubernetes manifests
// (kubernetes/, a kustomize base and two overlays) and Grafana dashboards
// (grafana/). Its test builds every overlay and checks the manifests
// against the Kubernetes API types and against each other; another checks
// that every metric the dashboards and the alerts query is one the node or
// the control plane registers (read from their source), with the type,
// labels and label values the query takes.
package deploy
