package kuiknode

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/enix/kuik/internal/testenv"
)

// PushBinaries compiles Go main packages of kuik's module (binary name -> import path) into
// static binaries for the node's platform (CGO_ENABLED=0: kuik's images have no libc) and pushes
// an image holding only them, each at /<name>, mode 0755 and owned by root, as
// repository:tag over plain HTTP. That is what the chart's credentialProviders.binDir.image
// mounts as an image volume: the credential-provider plugins, named as their providers. It
// returns the pushed image by digest.
func PushBinaries(ctx context.Context, repository, tag string, packages map[string]string) (name.Digest, error) {
	dir, err := os.MkdirTemp("", "kuik-binaries-")
	if err != nil {
		return name.Digest{}, fmt.Errorf("creating binary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	names := make([]string, 0, len(packages))
	for n := range packages {
		names = append(names, n)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		out := filepath.Join(dir, n)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, packages[n])
		cmd.Dir = testenv.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return name.Digest{}, fmt.Errorf("go build %s: %w: %s", packages[n], err, strings.TrimSpace(stderr.String()))
		}
		bin, err := os.ReadFile(out)
		if err != nil {
			return name.Digest{}, fmt.Errorf("reading the %s binary: %w", n, err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(bin)), ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
			return name.Digest{}, fmt.Errorf("building the binaries layer: %w", err)
		}
		if _, err := tw.Write(bin); err != nil {
			return name.Digest{}, fmt.Errorf("building the binaries layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return name.Digest{}, fmt.Errorf("building the binaries layer: %w", err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return name.Digest{}, fmt.Errorf("building the binaries layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return name.Digest{}, fmt.Errorf("building the binaries image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return name.Digest{}, fmt.Errorf("building the binaries image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch.UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return name.Digest{}, fmt.Errorf("building the binaries image: %w", err)
	}
	ref, err := name.NewTag(repository+":"+tag, name.Insecure)
	if err != nil {
		return name.Digest{}, fmt.Errorf("binaries image reference: %w", err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("digest of %s: %w", ref, err)
	}
	return ref.Context().Digest(d.String()), nil
}
