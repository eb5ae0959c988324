package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestImage builds the image with make image, as a user would, and checks
// it from the image itself. Containers cannot run on every machine that
// builds images (on this project's, crun may not set its limits), so the
// test does not run one: it saves the image as a docker archive, reads its
// config (user, health check, ports, volume, entrypoint, OCI labels) and
// its layers' files with their owners, and runs the binary it extracts
// from them. The image must hold no shell, which no container run could
// show better than its file list.
func TestImage(t *testing.T) {
	img, started := buildImage(t)
	c := img.Config.Config
	checkConfig(t, img)
	checkFiles(t, img)

	bin := filepath.Join(t.TempDir(), "paymentsd")
	if err := os.WriteFile(bin, img.content(t, "usr/local/bin/paymentsd"), 0o755); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, bin)
	version := checkVersion(t, bin)
	checkClosedByDefault(t, bin, c.Env)
	checkLabels(t, c.Labels, version, started)
}

// buildImage builds the image with make image, under a tag of its own
// removed when the test ends, and reads it from a docker archive. It
// returns the image and the second the build started in.
func buildImage(t *testing.T) (*image, time.Time) {
	t.Helper()
	tool := imageTool(t)
	tag := "localhost/paymentsd-imagetest:" + randomHex()
	started := time.Now().Truncate(time.Second)
	context := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "image", "IMAGE="+tag, "IMAGE_CONTEXT="+context)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(tool, "rmi", "-f", tag).Run() })
	archive := filepath.Join(t.TempDir(), "image.tar")
	if out, err := exec.Command(tool, "push", tag, "docker-archive:"+archive+":"+tag).CombinedOutput(); err != nil {
		t.Fatalf("%s push %s docker-archive: %v\n%s", tool, tag, err, out)
	}
	return readImage(t, archive), started
}

// checkConfig checks the image's config: a user not root, the entrypoint,
// the ports, the volume, the environment and the health check.
func checkConfig(t *testing.T, img *image) {
	t.Helper()
	c := img.Config.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532, not root", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/paymentsd"}) {
		t.Errorf("entrypoint %q", c.Entrypoint)
	}
	for _, port := range []string{"50051/tcp", "8080/tcp", "9090/tcp"} {
		if _, ok := c.ExposedPorts[port]; !ok {
			t.Errorf("port %s not exposed: %v", port, c.ExposedPorts)
		}
	}
	if _, ok := c.Volumes["/var/lib/paymentsd"]; !ok {
		t.Errorf("volumes %v, want /var/lib/paymentsd", c.Volumes)
	}
	for _, kv := range []string{"PAYMENTSD_LISTEN=0.0.0.0:50051", "PAYMENTSD_HTTP_LISTEN=0.0.0.0:8080", "PAYMENTSD_DB=/var/lib/paymentsd/paymentsd.db"} {
		if !slices.Contains(c.Env, kv) {
			t.Errorf("env %q, want %s", c.Env, kv)
		}
	}
	if c.Healthcheck == nil || !slices.Equal(c.Healthcheck.Test[:3], []string{"CMD", "/usr/local/bin/paymentsd", "health"}) {
		t.Errorf("health check %+v, want CMD paymentsd health", c.Healthcheck)
	}
}

// checkFiles checks the image's files: nothing but the binary, the
// certificates and the license (no shell, no other program), owned and
// moded as they should be, the certificates a PEM certificate.
func checkFiles(t *testing.T, img *image) {
	t.Helper()
	var files []string
	for name, h := range img.files {
		if h.Typeflag != tar.TypeDir {
			files = append(files, name)
		}
	}
	slices.Sort(files)
	if want := []string{"etc/ssl/certs/ca-certificates.crt", "usr/local/bin/paymentsd",
		"usr/share/doc/paymentsd/LICENSE", "usr/share/doc/paymentsd/NOTICE"}; !slices.Equal(files, want) {
		t.Errorf("the image's files are %q, want %q", files, want)
	}
	if _, ok := img.files["bin/sh"]; ok {
		t.Error("the image holds /bin/sh")
	}
	data, ok := img.files["var/lib/paymentsd"]
	if !ok || data.Typeflag != tar.TypeDir || data.Uid != 65532 || data.Gid != 65532 || data.Mode&0o077 != 0 {
		t.Errorf("/var/lib/paymentsd: %+v, want a directory of 65532:65532, mode 0700", data)
	}
	for _, dir := range []string{"var", "var/lib", "usr/local/bin", "etc/ssl/certs"} {
		if h, ok := img.files[dir]; ok && (h.Uid != 0 || h.Mode&0o022 != 0) {
			t.Errorf("/%s: owner %d, mode %o; want root's, writable by no one else", dir, h.Uid, h.Mode)
		}
	}
	for _, file := range []string{"usr/local/bin/paymentsd", "etc/ssl/certs/ca-certificates.crt"} {
		if h := img.files[file]; h == nil || h.Uid != 0 || h.Mode&0o022 != 0 {
			t.Errorf("/%s: %+v; want root's, writable by no one else", file, h)
		}
	}
	certs := img.content(t, "etc/ssl/certs/ca-certificates.crt")
	if block, _ := pem.Decode(certs); block == nil {
		t.Error("/etc/ssl/certs/ca-certificates.crt holds no PEM certificate")
	} else if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt: %v", err)
	}
}

// checkVersion checks that the binary at bin names the release of
// VERSION, its commit and its Go. It returns that release.
func checkVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("the image's paymentsd --version: %v", err)
	}
	version, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	want := regexp.MustCompile(`^paymentsd ` + regexp.QuoteMeta(strings.TrimSpace(string(version))) + ` \(rev (unknown|[0-9a-f]{7}(\+dirty)?), go1\.\S+\)$`)
	if !want.MatchString(first) {
		t.Errorf("the image's paymentsd --version: %q, want it to match %s", first, want)
	}
	return strings.TrimSpace(string(version))
}

// checkLabels checks the image's OCI labels: the release of VERSION, the
// checkout's commit, its source and license, and a build time in UTC.
func checkLabels(t *testing.T, labels map[string]string, version string, started time.Time) {
	t.Helper()
	const oci = "org.opencontainers.image."
	for name, want := range map[string]string{
		"version":  version,
		"source":   "https://github.com/paymentsd/paymentsd",
		"licenses": "Apache-2.0",
	} {
		if got := labels[oci+name]; got != want {
			t.Errorf("label %s%s = %q, want %q", oci, name, got, want)
		}
	}
	rev := labels[oci+"revision"]
	if !regexp.MustCompile(`^[0-9a-f]{40}(\+dirty)?$`).MatchString(rev) {
		t.Errorf("label %srevision = %q, want a commit, maybe +dirty", oci, rev)
	} else if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && !strings.HasPrefix(rev, strings.TrimSpace(string(head))) {
		t.Errorf("label %srevision = %q, want the checkout's %s", oci, rev, head)
	}
	created := labels[oci+"created"]
	at, err := time.Parse(time.RFC3339, created)
	switch {
	case err != nil || !strings.HasSuffix(created, "Z"):
		t.Errorf("label %screated = %q, want an RFC 3339 time in UTC (%v)", oci, created, err)
	case at.Before(started) || at.After(time.Now()):
		t.Errorf("label %screated = %s, want a time while the test built it (from %s)", oci, created, started.UTC().Format(time.RFC3339))
	}
}

// checkClosedByDefault runs the image's binary in the image's environment:
// without keys or PAYMENTSD_DEV it must refuse to start, as it listens on
// every interface; with PAYMENTSD_DEV=true it serves.
func checkClosedByDefault(t *testing.T, bin string, imageEnv []string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = imageEnv
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--dev") || !strings.Contains(string(out), "--api-keys") {
		t.Errorf("the image's defaults without keys: %v, want exit 2 naming --api-keys and --dev:\n%s", err, out)
	}

	// The same with PAYMENTSD_DEV=true, on free ports of every interface
	// and a data file of the test's.
	env := []string{"PAYMENTSD_DEV=true", "PAYMENTSD_DB=" + filepath.Join(t.TempDir(), "paymentsd.db")}
	for _, kv := range imageEnv {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(name, "_LISTEN") && strings.HasPrefix(value, "0.0.0.0:") {
			env = append(env, name+"=0.0.0.0:0")
		} else if name != "PAYMENTSD_DB" {
			env = append(env, kv)
		}
	}
	dev := exec.Command(bin)
	dev.Env = env
	stderr, err := dev.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		dev.Process.Kill()
		dev.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"msg":"paymentsd listening"`) {
			return
		}
	}
	t.Errorf("the image's binary with PAYMENTSD_DEV=true did not serve")
}

// checkStatic fails t unless the binary at path needs no dynamic loader,
// carries no symbol table or debug information, and was built with CGO
// off and the time zone database embedded.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's paymentsd is dynamically linked")
		}
	}
	for _, name := range []string{".symtab", ".debug_info", ".zdebug_info"} {
		if f.Section(name) != nil {
			t.Errorf("the image's paymentsd has a %s section: build it with -ldflags='-s -w'", name)
		}
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || !slices.Contains(strings.Split(settings["-tags"], ","), "timetzdata") {
		t.Errorf("the image's paymentsd was built with CGO_ENABLED=%q and -tags=%q, want 0 and timetzdata", settings["CGO_ENABLED"], settings["-tags"])
	}
}

// imageTool is podman, else buildah. Without either the test is skipped,
// but under CI=true, where .ci/run installs podman, it fails.
func imageTool(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"podman", "buildah"} {
		if _, err := exec.LookPath(tool); err == nil {
			return tool
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("neither podman nor buildah is installed (apt-get install podman); CI=true, so not skipped")
	}
	t.Skip("neither podman nor buildah is installed (apt-get install podman)")
	return ""
}

// randomHex names this run's image, so that runs side by side, or one
// after a run that left its image, do not meet.
func randomHex() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// image is a docker archive's image: its config, and the files of its
// layers, the last layer's winning.
type image struct {
	Config struct {
		Config struct {
			User         string
			Env          []string
			Entrypoint   []string
			ExposedPorts map[string]struct{}
			Volumes      map[string]struct{}
			Healthcheck  *struct{ Test []string }
			Labels       map[string]string
		} `json:"config"`
	}
	files    map[string]*tar.Header // by path, without a leading / or ./
	contents map[string][]byte      // of the regular files
}

// readImage reads the docker archive at file (docker save's format).
func readImage(t *testing.T, file string) *image {
	t.Helper()
	entries := readTar(t, file)
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v, %d images", err, len(manifest))
	}
	img := &image{files: map[string]*tar.Header{}, contents: map[string][]byte{}}
	if err := json.Unmarshal(entries[manifest[0].Config], &img.Config); err != nil {
		t.Fatalf("config %s: %v", manifest[0].Config, err)
	}
	for _, layer := range manifest[0].Layers {
		r := bufio.NewReader(bytes.NewReader(entries[layer]))
		var src io.Reader = r
		if magic, _ := r.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
			z, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			src = z
		}
		tr := tar.NewReader(src)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", layer, err)
			}
			name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
			img.files[name] = h
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				img.contents[name] = b
			}
		}
	}
	return img
}

// content is the regular file name of img; its absence fails t.
func (img *image) content(t *testing.T, name string) []byte {
	t.Helper()
	b, ok := img.contents[name]
	if !ok {
		t.Fatalf("the image has no file /%s", name)
	}
	return b
}

// readTar is every regular file of the tar at path, by name.
func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}
