package testnode

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/enix/kuik/internal/testutil"
)

// GuestImage is a one-layer image of the guest program (/guest, entrypoint; `pause` by
// default) for the node's platform. label goes into a file and the config, so that images with
// different labels have different digests (a pull then really fetches).
func GuestImage(guest, label string) (v1.Image, error) {
	bin, err := os.ReadFile(guest)
	if err != nil {
		return nil, fmt.Errorf("reading the guest program: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"guest", 0o755, bin},
		{"image-label", 0o644, []byte(label + "\n")},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: epoch}); err != nil {
			return nil, fmt.Errorf("building image layer: %w", err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("building image layer: %w", err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, fmt.Errorf("building image layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("building image layer: %w", err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("building image layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch.UTC()}
	cf.Config.Entrypoint = []string{"/guest"}
	cf.Config.Cmd = []string{"pause"}
	cf.Config.Labels = map[string]string{"kuik.test/label": label}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("building image: %w", err)
	}
	return img, nil
}

func writeImageTar(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("writing image %s: %w", ref, err)
	}
	return nil
}

// Registry starts an OCI registry on the node's address (so that pods reach it as well as
// containerd), with basic authentication when username is set, and tells containerd to use
// plain HTTP with it. It stops when the test ends.
func (n *Node) Registry(t testing.TB, username, password string) *testutil.Registry {
	t.Helper()
	r := testutil.NewRegistryAt(t, NodeIP+":0", username, password)
	if err := n.writeRegistryHosts(r.Host); err != nil {
		t.Fatal(err)
	}
	return r
}

// PushGuest pushes a guest image labelled with repoAndTag to the registry and returns its
// reference.
func (n *Node) PushGuest(t testing.TB, r *testutil.Registry, repoAndTag string) string {
	t.Helper()
	img, err := GuestImage(n.guest, r.Host+"/"+repoAndTag)
	if err != nil {
		t.Fatal(err)
	}
	return r.PushImage(t, repoAndTag, img)
}
