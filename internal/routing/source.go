package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
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

const (
	pullSecretPrefix = "kuik-inject-"
	// hashLen hex characters of sha256 keep names unique enough while leaving most of the
	// readable prefix in place.
	hashLen = 10
)

// PullSecretName is the name of the Secret holding the injected credentials of one resource,
// the same in every namespace: "kuik-inject-<kind>-<name>", kind lower-cased.
//
// A resource name may be up to 253 characters, so the full name may exceed what a Secret name
// allows; it is then cut and suffixed with a hash of the full name, which keeps it
// deterministic (the webhook and the syncer compute it apart) and distinct from the names of
// other resources sharing the same prefix.
func PullSecretName(kind Kind, name string) string {
	full := pullSecretPrefix + strings.ToLower(string(kind)) + "-" + name
	if len(full) <= validation.DNS1123SubdomainMaxLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	// A cut may end on a '.' or '-', which would leave an empty or '-'-ended DNS label.
	cut := strings.TrimRight(full[:validation.DNS1123SubdomainMaxLength-1-hashLen], "-.")
	return cut + "-" + hex.EncodeToString(sum[:])[:hashLen]
}
