package images

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// AnnotationRefName names an index inside an OCI layout (the OCI image layout spec).
const AnnotationRefName = "org.opencontainers.image.ref.name"

// WriteLayout replaces dir with an OCI image layout holding every image, each index named
// <name>:<tag> (org.opencontainers.image.ref.name), the blobs they share stored once.
func WriteLayout(dir string, imgs []Image, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the previous layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the layout %s: %w", dir, err)
	}
	for _, img := range imgs {
		ref := img.Component.Name + ":" + tag
		if err := p.AppendIndex(img.Index, layout.WithAnnotations(map[string]string{AnnotationRefName: ref})); err != nil {
			return fmt.Errorf("writing %s to the layout: %w", ref, err)
		}
	}
	return nil
}

// Reference is where Push put an image: by tag, and by digest.
func Reference(prefix string, c Component, tag string, opts ...name.Option) (name.Tag, error) {
	s := strings.TrimSuffix(prefix, "/") + "/" + c.Name + ":" + tag
	t, err := name.NewTag(s, append([]name.Option{name.StrictValidation}, opts...)...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image reference %q: %w", s, err)
	}
	return t, nil
}

// PushOptions say where and how Push writes.
type PushOptions struct {
	// Prefix is the registry and repository path the images go under: host[:port][/path].
	Prefix string
	// Tag every index is pushed as.
	Tag string
	// Insecure talks plain HTTP to the registry (go-containerregistry already does for
	// localhost, loopback and RFC 1918 addresses).
	Insecure bool
	// Remote are extra options, e.g. remote.WithAuth or remote.WithTransport.
	Remote []remote.Option
}

// Push pushes each image's index (with its manifests and blobs) as <prefix>/<name>:<tag>, and
// returns the references by digest, in the order of imgs.
func Push(ctx context.Context, imgs []Image, o PushOptions) ([]name.Digest, error) {
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ropts := append([]remote.Option{remote.WithContext(ctx)}, o.Remote...)
	out := make([]name.Digest, 0, len(imgs))
	for _, img := range imgs {
		tag, err := Reference(o.Prefix, img.Component, o.Tag, nameOpts...)
		if err != nil {
			return nil, err
		}
		d, err := img.Index.Digest()
		if err != nil {
			return nil, fmt.Errorf("digest of %s: %w", img.Component.Name, err)
		}
		if err := remote.WriteIndex(tag, img.Index, ropts...); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", tag, err)
		}
		out = append(out, tag.Context().Digest(d.String()))
	}
	return out, nil
}
