// Package deploy holds shardcache's deployment files: Kubernetes manifests
// (kubernetes/, a kustomize base and two overlays) and Grafana dashboards
// (grafana/). Its test builds every overlay and checks the manifests
// against the Kubernetes API types and against each other.
package deploy
