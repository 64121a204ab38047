package routing

import (
	"errors"
	"fmt"
	"strings"
)

// Kind of routing resource.
type Kind string

const (
	KindImageAlternative Kind = "ImageAlternative"
	KindImageMirror      Kind = "ImageMirror"
)

// Source identifies where a candidate comes from: the zero value is the original image.
type Source struct {
	Kind Kind
	Name string
}

// ErrInvalidSource is returned by ParseSource for a value that names no routing resource.
var ErrInvalidSource = errors.New("invalid routing source")

// IsOriginal reports whether the candidate is the container's own image.
func (s Source) IsOriginal() bool {
	return s == Source{}
}

// String is the form recorded in the kuik.enix.io/rewritten-by annotation:
// "ImageAlternative/<name>", "ImageMirror/<name>", or "original".
func (s Source) String() string {
	if s.IsOriginal() {
		return "original"
	}
	return string(s.Kind) + "/" + s.Name
}

// ParseSource reads back what Source.String wrote, so that the syncer can tell from a pod's
// annotations which resource rewrote it.
func ParseSource(s string) (Source, error) {
	if s == "original" {
		return Source{}, nil
	}
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return Source{}, fmt.Errorf("%w: %q", ErrInvalidSource, s)
	}
	switch Kind(kind) {
	case KindImageAlternative, KindImageMirror:
		return Source{Kind: Kind(kind), Name: name}, nil
	default:
		return Source{}, fmt.Errorf("%w: unknown kind in %q", ErrInvalidSource, s)
	}
}
