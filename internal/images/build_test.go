package images_test

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/enix/kuik/internal/images"
)

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestBuild builds every image for both platforms with go build, pushes them to a registry
// with basic auth, pulls them back and checks what a kubelet would run.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries; not in -short")
	}
	ctx := t.Context()
	src := images.Source{Created: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Revision: "0123456789abcdef"}
	// Every build reads one copy of the sources, away from the checkout: the digests compared
	// are those of one tree, and its path is not the checkout's.
	dir := snapshot(t)
	start := time.Now()
	binDir := t.TempDir()
	imgs, err := images.Build(ctx, images.Options{BinDir: binDir, Dir: dir, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build: %s", time.Since(start))
	if len(imgs) != 3 || imgs[0].Component.Name != "kuik-webhook" || imgs[1].Component.Name != "kuik-secret-syncer" || imgs[2].Component.Name != "kuik-keeper" {
		t.Fatalf("built %v, want kuik-webhook, kuik-secret-syncer and kuik-keeper", imgs)
	}

	const user, pass = "pusher", "s3cret"
	srv := httptest.NewServer(basicAuth(user, pass, registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	t.Cleanup(srv.Close)
	prefix := strings.TrimPrefix(srv.URL, "http://") + "/kuik"
	auth := remote.WithAuth(&authn.Basic{Username: user, Password: pass})
	refs, err := images.Push(ctx, imgs, images.PushOptions{Prefix: prefix, Tag: "test", Remote: []remote.Option{auth}})
	if err != nil {
		t.Fatal(err)
	}

	for i, img := range imgs {
		c := img.Component
		t.Run(c.Name, func(t *testing.T) {
			want, err := img.Index.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if refs[i].DigestStr() != want.String() || refs[i].Context().String() != prefix+"/"+c.Name {
				t.Errorf("pushed %s, want %s/%s@%s", refs[i], prefix, c.Name, want)
			}
			tag, err := images.Reference(prefix, c, "test")
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(tag, auth, remote.WithContext(ctx))
			if err != nil {
				t.Fatalf("pulling %s: %v", tag, err)
			}
			if got, _ := idx.Digest(); got != want {
				t.Errorf("pulled %s by tag, want %s", got, want)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var platforms []string
			for _, desc := range m.Manifests {
				platforms = append(platforms, desc.Platform.String())
				t.Run(desc.Platform.String(), func(t *testing.T) {
					child, err := idx.Image(desc.Digest)
					if err != nil {
						t.Fatal(err)
					}
					checkImage(t, c, *desc.Platform, child)
				})
			}
			if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
				t.Errorf("index platforms (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("reproducible", func(t *testing.T) {
		start := time.Now()
		again, err := images.Build(ctx, images.Options{BinDir: t.TempDir(), Dir: dir, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("second build, binaries relinked and compressed again in another directory: %s", time.Since(start))
		start = time.Now()
		warm, err := images.Build(ctx, images.Options{BinDir: binDir, Dir: dir, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("third build, in the first one's directory (binaries and layers reused): %s", time.Since(start))
		for i := range imgs {
			d1, _ := imgs[i].Index.Digest()
			for name, b := range map[string][]images.Image{"in another directory": again, "in the same directory": warm} {
				if d2, _ := b[i].Index.Digest(); d1 != d2 {
					t.Errorf("%s: rebuilding %s gave %s, first build %s", imgs[i].Component.Name, name, d2, d1)
				}
			}
		}
	})

	t.Run("layout", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "images")
		if err := images.WriteLayout(dir, imgs, "v9"); err != nil {
			t.Fatal(err)
		}
		// Written twice: the layout is replaced, not appended to.
		if err := images.WriteLayout(dir, imgs, "v9"); err != nil {
			t.Fatal(err)
		}
		p, err := layout.FromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		root, err := p.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		m, err := root.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range m.Manifests {
			got[d.Annotations[images.AnnotationRefName]] = d.Digest.String()
		}
		want := map[string]string{}
		for _, img := range imgs {
			d, _ := img.Index.Digest()
			want[img.Component.Name+":v9"] = d.String()
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("layout index (-want +got):\n%s", diff)
		}
	})
}

// checkImage checks one platform's image: config, files, and the binary as the kernel sees it.
func checkImage(t *testing.T, c images.Component, p v1.Platform, img v1.Image) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("config platform %s/%s, index says %s", cf.OS, cf.Architecture, p)
	}
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	u, uerr := strconv.Atoi(uid)
	g, gerr := strconv.Atoi(gid)
	if !ok || uerr != nil || gerr != nil || u == 0 || g == 0 {
		t.Errorf("config User %q, want numeric non-root uid:gid (runAsNonRoot needs a numeric user)", cf.Config.User)
	}
	if diff := cmp.Diff([]string{c.Binary}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	files := flatten(t, img)
	if passwd := string(files["etc/passwd"].data); !strings.Contains(passwd, ":x:"+uid+":"+gid+":") {
		t.Errorf("/etc/passwd has no entry for %s:\n%s", cf.Config.User, passwd)
	}
	bin, ok := files[strings.TrimPrefix(c.Binary, "/")]
	if !ok {
		t.Fatalf("no %s in the image", c.Binary)
	}
	if bin.mode&0o111 == 0 || bin.uid != 0 || bin.gid != 0 {
		t.Errorf("%s mode %o owner %d:%d, want executable and owned by root", c.Binary, bin.mode, bin.uid, bin.gid)
	}
	checkStaticELF(t, bin.data, p.Architecture)
	checkBuildInfo(t, c, bin.data, p.Architecture)
	if p.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
		checkRuns(t, c, bin.data)
	}
}

func checkStaticELF(t *testing.T, b []byte, arch string) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	if f.Machine != elfMachine[arch] {
		t.Errorf("ELF machine %s, want %s for %s", f.Machine, elfMachine[arch], arch)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("ELF has a %s program header: dynamically linked", prog.Type)
		}
	}
}

func checkBuildInfo(t *testing.T, c images.Component, b []byte, arch string) {
	bi, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("reading build info: %v", err)
	}
	if bi.Path != c.Package {
		t.Errorf("binary of %s, want %s", bi.Path, c.Package)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": arch, "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("build setting %s=%q, want %q", k, settings[k], v)
		}
	}
	if _, ok := settings["vcs.revision"]; ok {
		t.Errorf("binary carries vcs.revision: its digest would depend on the checkout's state")
	}
	// The webhook keeps x509roots/fallback's roots for when no bundle can be read (an
	// SSL_CERT_FILE naming a missing file, a volume mounted over /etc/ssl/certs); the syncer and the
	// keeper read the image's bundle only.
	fallback := false
	for _, d := range bi.Deps {
		fallback = fallback || d.Path == "golang.org/x/crypto/x509roots/fallback"
	}
	if want := c.Name == "kuik-webhook"; fallback != want {
		t.Errorf("links golang.org/x/crypto/x509roots/fallback: %t, want %t", fallback, want)
	}
}

// checkRuns runs the binary as extracted from the image with --help.
func checkRuns(t *testing.T, c images.Component, b []byte) {
	path := filepath.Join(t.TempDir(), filepath.Base(c.Binary))
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), path, "--help")
	cmd.Env = []string{} // nothing from the test's environment, as in an empty image
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", c.Binary, err, out)
	}
	if !strings.Contains(string(out), "Usage:") || !strings.Contains(string(out), filepath.Base(c.Binary)) {
		t.Errorf("%s --help printed no usage:\n%s", c.Binary, out)
	}
}

// snapshot copies what the images are built from (go.mod, go.sum and the directories of the
// module's packages the commands import) into a temporary directory.
func snapshot(t *testing.T) string {
	t.Helper()
	goList := func(args ...string) []string {
		out, err := exec.CommandContext(t.Context(), "go", append([]string{"list"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	root := goList("-m", "-f", "{{.Dir}}")[0]
	pkgs := make([]string, 0, len(images.Components))
	for _, c := range images.Components {
		pkgs = append(pkgs, c.Package)
	}
	dirs := goList(append([]string{"-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}"}, pkgs...)...)
	dst := t.TempDir()
	copyFile := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("go.mod")
	copyFile("go.sum")
	for _, d := range dirs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				copyFile(filepath.Join(rel, e.Name()))
			}
		}
	}
	return dst
}

type imageFile struct {
	mode     int64
	uid, gid int
	data     []byte
}

// flatten reads the image's filesystem as the runtime would unpack it.
func flatten(t *testing.T, img v1.Image) map[string]imageFile {
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading the image's filesystem: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = imageFile{mode: h.Mode, uid: h.Uid, gid: h.Gid, data: data}
	}
}

func basicAuth(user, pass string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
