// Package deploy holds no code. Its directories are the files a deployment
// of paymentsd starts from (kubernetes/, systemd/), the Prometheus rules
// that watch it (prometheus/) and its Grafana dashboard (grafana/, which
// grafana/gen writes). Its tests hold them, and the Containerfile's image,
// to what they promise. So the libraries that read manifests are the
// tests' alone, never paymentsd's.
package deploy
