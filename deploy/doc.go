// Package deploy holds no code: its directories are the files a
// deployment of paymentsd starts from (kubernetes/, systemd/), and its
// tests hold them, and the Containerfile's image, to what they promise,
// so that the libraries that read manifests are the tests' alone and
// never paymentsd's.
package deploy
