package images

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

type entry struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	ModTime  time.Time
	Data     string
}

func readTar(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		out = append(out, entry{Name: h.Name, Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, ModTime: h.ModTime.UTC(), Data: string(data)})
	}
}

func TestRootLayer(t *testing.T) {
	b, err := layerTar(rootFiles())
	if err != nil {
		t.Fatal(err)
	}
	got := readTar(t, b)
	var bundlePEM string
	for i := range got {
		if "/"+got[i].Name == CABundlePath {
			bundlePEM, got[i].Data = got[i].Data, "(checked below)"
		}
	}
	epoch := time.Unix(0, 0).UTC()
	want := []entry{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, ModTime: epoch, Data: "root:x:0:\nnonroot:x:65532:\n"},
		{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, ModTime: epoch,
			Data: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{Name: "etc/ssl/", Type: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "etc/ssl/certs/", Type: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "etc/ssl/certs/ca-certificates.crt", Type: tar.TypeReg, Mode: 0o644, ModTime: epoch, Data: "(checked below)"},
		{Name: "home/", Type: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "home/nonroot/", Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532, ModTime: epoch},
		{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777, ModTime: epoch},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("root layer (-want +got):\n%s", diff)
	}
	checkCABundle(t, []byte(bundlePEM))
}

// checkCABundle checks that b is the PEM of exactly the roots of x509roots/fallback that carry no
// constraint, each a CA certificate, in the bundle's order.
func checkCABundle(t *testing.T, b []byte) {
	t.Helper()
	var want []*x509.Certificate
	constrained := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			constrained++
			continue
		}
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, c)
	}
	var got []*x509.Certificate
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				t.Fatalf("%s: %d bytes after the last certificate", CABundlePath, len(rest))
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			t.Fatalf("%s: a %q block", CABundlePath, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", CABundlePath, err)
		}
		if !c.IsCA {
			t.Errorf("%s: %s is not a CA", CABundlePath, c.Subject)
		}
		got = append(got, c)
	}
	if len(want) < 100 {
		t.Fatalf("x509roots/fallback has %d unconstrained roots: not Mozilla's list", len(want))
	}
	if len(got) != len(want) {
		t.Fatalf("%s holds %d certificates, want the %d unconstrained roots of x509roots/fallback (%d constrained ones left out)", CABundlePath, len(got), len(want), constrained)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("%s: certificate %d is %s, want %s", CABundlePath, i, got[i].Subject, want[i].Subject)
		}
	}
}

func TestLayerTarIsReproducible(t *testing.T) {
	files := []file{
		{name: "b", mode: 0o755, data: []byte("bee")},
		{name: "a/", mode: 0o755},
		{name: "a/c", mode: 0o644, data: []byte("sea")},
	}
	reversed := []file{files[2], files[1], files[0]}
	tests := map[string][]file{
		"same files":                   files,
		"same files in another order":  reversed,
		"same files in a copied slice": append([]file(nil), files...),
	}
	first, err := layer(files)
	if err != nil {
		t.Fatal(err)
	}
	want, err := first.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for name, fs := range tests {
		t.Run(name, func(t *testing.T) {
			l, err := layer(fs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("digest %s, want %s", got, want)
			}
		})
	}
	t.Run("different contents", func(t *testing.T) {
		l, err := layer([]file{{name: "b", mode: 0o755, data: []byte("bee!")}, files[1], files[2]})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := l.Digest(); got == want {
			t.Errorf("digest %s for different contents, want a different one", got)
		}
	})
}

func TestImageConfig(t *testing.T) {
	base, err := layer(rootFiles())
	if err != nil {
		t.Fatal(err)
	}
	c := Components[0]
	p := v1.Platform{OS: "linux", Architecture: "arm64"}
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	src := Source{Created: created, Revision: "abc123"}
	app, err := layer([]file{{name: "webhook", mode: 0o755, data: []byte("not really a binary")}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := image(c, p, base, app, created, src.annotations())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{
		AnnotationCreated:  "2026-11-30T12:00:00Z",
		AnnotationRevision: "abc123",
		AnnotationSource:   "https://github.com/enix/kuik",
		AnnotationTitle:    "kuik-webhook",
	}
	want := v1.Config{User: "65532:65532", Entrypoint: []string{"/webhook"}, WorkingDir: "/", Labels: labels}
	if diff := cmp.Diff(want, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Equal(created) {
		t.Errorf("config os/arch/created = %s/%s/%s, want linux/arm64/%s", cf.OS, cf.Architecture, cf.Created.Time, created)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(labels, m.Annotations); diff != "" {
		t.Errorf("manifest annotations (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (base, binary)", len(layers))
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	wantBin := []entry{{Name: "webhook", Type: tar.TypeReg, Mode: 0o755, ModTime: time.Unix(0, 0).UTC(), Data: "not really a binary"}}
	if diff := cmp.Diff(wantBin, readTar(t, b)); diff != "" {
		t.Errorf("binary layer (-want +got):\n%s", diff)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(created) || !strings.HasPrefix(h.CreatedBy, "kuik images: ") {
			t.Errorf("history %+v, want created %s by kuik images", h, created)
		}
	}

	later, err := image(c, p, base, app, created.Add(time.Second), src.annotations())
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := later.Digest()
	if d1 == d2 {
		t.Errorf("same digest %s for two creation times: the digest comparisons of the build test would prove nothing", d1)
	}
}

func TestCachedLayer(t *testing.T) {
	dir := t.TempDir()
	files := []file{{name: "webhook", mode: 0o755, data: []byte("binary v1")}}
	fresh, err := layer(files)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fresh.Digest()

	first, path, err := cachedLayer(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no cached layer: %v", err)
	}
	// What is read back from the cache, not compressed again, is the same layer.
	if err := os.Chtimes(path, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	again, path2, err := cachedLayer(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]v1.Layer{"first": first, "from the cache": again} {
		if got, _ := l.Digest(); got != want {
			t.Errorf("%s: digest %s, want %s as uncached", name, got, want)
		}
	}
	if path2 != path {
		t.Errorf("cached at %s then %s", path, path2)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(time.Unix(1, 0)) {
		t.Errorf("the cached layer was rewritten")
	}

	changed, path3, err := cachedLayer(dir, []file{{name: "webhook", mode: 0o755, data: []byte("binary v2")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := changed.Digest(); got == want || path3 == path {
		t.Errorf("a changed binary got the cached layer %s (%s)", got, path3)
	}
	if err := pruneLayers(dir, map[string]bool{path3: true}); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if diff := cmp.Diff([]string{path3}, left); diff != "" {
		t.Errorf("after pruning (-want +got):\n%s", diff)
	}
}
