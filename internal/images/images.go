// Package images builds kuik's container images from source without a container engine or a
// base image: `go build` (static, -trimpath) for each platform, then an OCI image index per
// component assembled with go-containerregistry. The images are two layers — a base holding
// /etc/passwd and /etc/group (uid 65532 "nonroot"), /tmp and /home/nonroot, identical for every
// image, and the binary — with the user 65532:65532 and the binary as entrypoint.
//
// The same source gives the same digests on any machine with the same Go toolchain: tar entries
// are sorted with fixed times, owners and modes, gzip headers carry no time, the binaries have
// no VCS stamp nor paths, and the configs' creation time is the commit time (SOURCE_DATE_EPOCH
// when set).
//
// make images (hack/images) writes an OCI layout and pushes to a registry; tests, the demo and
// the e2e tests call Build and Push.
package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// Component is one image: the Go package of its command and where the binary sits in the image.
type Component struct {
	// Name is the image's name under the registry prefix, e.g. kuik-webhook.
	Name string
	// Package is the main package's import path.
	Package string
	// Binary is the binary's path in the image, also the entrypoint.
	Binary string
}

// Components are kuik's images, named as the chart's default repositories.
var Components = []Component{
	{Name: "kuik-webhook", Package: "github.com/enix/kuik/cmd/webhook", Binary: "/webhook"},
	{Name: "kuik-secret-syncer", Package: "github.com/enix/kuik/cmd/secret-syncer", Binary: "/secret-syncer"},
	{Name: "kuik-keeper", Package: "github.com/enix/kuik/cmd/keeper", Binary: "/keeper"},
}

// DefaultPlatforms are the platforms of every index unless Options says otherwise.
var DefaultPlatforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// Annotation keys the images carry (OCI image spec, pre-defined annotations).
const (
	AnnotationCreated  = "org.opencontainers.image.created"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationTitle    = "org.opencontainers.image.title"
)

// sourceURL is where the images come from (the chart's home).
const sourceURL = "https://github.com/enix/kuik"

// Source is what the images record about the source they were built from.
type Source struct {
	// Created is the configs' creation time: the commit time, so that rebuilding a commit
	// gives the same digests.
	Created time.Time
	// Revision is the commit, recorded as an annotation when not empty.
	Revision string
}

// Options of Build.
type Options struct {
	// Platforms to build, DefaultPlatforms when empty. Only linux platforms are supported.
	Platforms []v1.Platform
	// BinDir is where go build writes the binaries (one directory per platform). Keep it between
	// builds and go build relinks only what changed. A temporary directory when empty.
	BinDir string
	// Dir is a directory inside kuik's module, where go build runs; the working directory when
	// empty.
	Dir string
	// Source is recorded in the images.
	Source Source
}

// Image is one component's built image index.
type Image struct {
	Component Component
	Index     v1.ImageIndex
}

// Build compiles every component for every platform and assembles one image index per component,
// in the order of Components.
func Build(ctx context.Context, o Options) ([]Image, error) {
	platforms := o.Platforms
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	platforms = sortedPlatforms(platforms)
	for _, p := range platforms {
		if p.OS != "linux" {
			return nil, fmt.Errorf("platform %s: only linux is supported", p)
		}
	}
	binDir := o.BinDir
	if binDir == "" {
		tmp, err := os.MkdirTemp("", "kuik-images-")
		if err != nil {
			return nil, fmt.Errorf("creating binary directory: %w", err)
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		binDir = tmp
	}
	base, err := layer(rootFiles())
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	annotations := o.Source.annotations()

	// Every binary first, then every image at once: compressing is most of the rest.
	dirs := make([]string, len(platforms))
	for i, p := range platforms {
		dir, err := filepath.Abs(filepath.Join(binDir, platformDir(p)))
		if err != nil {
			return nil, fmt.Errorf("binary directory: %w", err)
		}
		if err := goBuild(ctx, o.Dir, p, dir, Components); err != nil {
			return nil, err
		}
		dirs[i] = dir
	}
	manifests := make([][]mutate.IndexAddendum, len(Components))
	layers := make([][]string, len(Components))
	var g errgroup.Group
	for i, c := range Components {
		manifests[i] = make([]mutate.IndexAddendum, len(platforms))
		layers[i] = make([]string, len(platforms))
		for j, p := range platforms {
			g.Go(func() error {
				bin, err := os.ReadFile(filepath.Join(dirs[j], path0(c.Package)))
				if err != nil {
					return fmt.Errorf("reading the %s binary: %w", c.Name, err)
				}
				app, cached, err := cachedLayer(dirs[j], []file{{name: strings.TrimPrefix(c.Binary, "/"), mode: 0o755, data: bin}})
				if err != nil {
					return fmt.Errorf("%s for %s: binary layer: %w", c.Name, p, err)
				}
				img, err := image(c, p, base, app, o.Source.Created, annotations)
				if err != nil {
					return fmt.Errorf("%s for %s: %w", c.Name, p, err)
				}
				manifests[i][j] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}}
				layers[i][j] = cached
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for j, dir := range dirs {
		keep := map[string]bool{}
		for i := range Components {
			keep[layers[i][j]] = true
		}
		if err := pruneLayers(dir, keep); err != nil {
			return nil, err
		}
	}

	out := make([]Image, len(Components))
	for i, c := range Components {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		idx = mutate.AppendManifests(idx, manifests[i]...)
		a := withTitle(annotations, c.Name)
		idx, ok := mutate.Annotations(idx, a).(v1.ImageIndex)
		if !ok {
			return nil, errors.New("annotating the index: not an index")
		}
		out[i] = Image{Component: c, Index: idx}
	}
	return out, nil
}

// image is one component's image for one platform: the base layer, then the binary's.
func image(c Component, p v1.Platform, base, app v1.Layer, created time.Time, annotations map[string]string) (v1.Image, error) {
	at := v1.Time{Time: created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: at, CreatedBy: "kuik images: /etc/passwd, /etc/group, /home/nonroot, /tmp"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: at, CreatedBy: "kuik images: go build " + c.Package}},
	)
	if err != nil {
		return nil, fmt.Errorf("appending layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = at
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = p.OS, p.Architecture, p.Variant, p.OSVersion
	cf.Config.User = User
	cf.Config.Entrypoint = []string{c.Binary}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = withTitle(annotations, c.Name)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting config: %w", err)
	}
	img, ok := mutate.Annotations(img, withTitle(annotations, c.Name)).(v1.Image)
	if !ok {
		return nil, errors.New("annotating the image: not an image")
	}
	return img, nil
}

// goBuild builds the components' static binaries for p into dir (named after their package).
func goBuild(ctx context.Context, moduleDir string, p v1.Platform, dir string, cs []Component) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
	for _, c := range cs {
		args = append(args, c.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), buildEnv(p)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w: %s", p, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// buildEnv is the environment that makes go build's output static and the same everywhere:
// no cgo, and the baseline instruction set whatever the caller's GOAMD64/GOARM64/GOARM.
func buildEnv(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture, "GOAMD64=v1", "GOARM64=v8.0"}
	if p.Architecture == "arm" {
		env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	return env
}

// platformDir names p's binary directory: linux_amd64, linux_arm_v7.
func platformDir(p v1.Platform) string {
	parts := []string{p.OS, p.Architecture}
	if p.Variant != "" {
		parts = append(parts, p.Variant)
	}
	return strings.Join(parts, "_")
}

// path0 is the last element of an import path: go build's name for its binary.
func path0(pkg string) string { return pkg[strings.LastIndex(pkg, "/")+1:] }

// sortedPlatforms orders platforms so that an index's manifests do not depend on the caller's
// order.
func sortedPlatforms(ps []v1.Platform) []v1.Platform {
	out := append([]v1.Platform(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func (s Source) annotations() map[string]string {
	a := map[string]string{
		AnnotationCreated: s.Created.UTC().Format(time.RFC3339),
		AnnotationSource:  sourceURL,
	}
	if s.Revision != "" {
		a[AnnotationRevision] = s.Revision
	}
	return a
}

func withTitle(a map[string]string, title string) map[string]string {
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	out[AnnotationTitle] = title
	return out
}

// GitSource is the Source of the checkout holding dir: SOURCE_DATE_EPOCH (seconds) when set,
// otherwise the commit time of HEAD, and HEAD's hash. Outside a git checkout (a source archive)
// it is the Unix epoch and no revision.
func GitSource(ctx context.Context, dir string) (Source, error) {
	var s Source
	if out, err := git(ctx, dir, "log", "-1", "--format=%H %ct"); err == nil {
		rev, ct, _ := strings.Cut(out, " ")
		sec, err := strconv.ParseInt(ct, 10, 64)
		if err != nil {
			return Source{}, fmt.Errorf("parsing the commit time %q: %w", ct, err)
		}
		s = Source{Created: time.Unix(sec, 0).UTC(), Revision: rev}
	} else {
		s.Created = time.Unix(0, 0).UTC()
	}
	if env := os.Getenv("SOURCE_DATE_EPOCH"); env != "" {
		sec, err := strconv.ParseInt(env, 10, 64)
		if err != nil {
			return Source{}, fmt.Errorf("parsing SOURCE_DATE_EPOCH=%q: %w", env, err)
		}
		s.Created = time.Unix(sec, 0).UTC()
	}
	return s, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
