// Package deploy holds rdisk's deployment files: systemd units (systemd/),
// example target configurations (config/), container images (docker/),
// Kubernetes manifests (k8s/) and a Grafana dashboard (grafana/); see
// README.md. It has no code of its own: its tests check that the files are
// what rdisk and the tools that read them accept.
package deploy
