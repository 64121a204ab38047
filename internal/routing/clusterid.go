package routing

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxClusterIDLength bounds a cluster ID: it is part of every kept tag (at most 128 bytes).
const MaxClusterIDLength = 32

// ClusterTagInfix separates an image's tag from the cluster ID in a mirror's tag:
// nginx:1.27 is nginx:1.27-kuik-<cluster ID> in the mirror.
const ClusterTagInfix = "-kuik-"

// maxTagLength is the reference grammar's limit on a tag.
const maxTagLength = 128

// ErrClusterTagTooLong: the image's tag with the cluster's suffix would be over the reference
// grammar's limit of 128 bytes, so the mirror cannot name the image for this cluster.
var ErrClusterTagTooLong = errors.New("the image's tag with the cluster ID suffix would be longer than 128 bytes")

// ValidateClusterID checks a cluster ID: a DNS label (lowercase letters, digits and '-') of at
// most MaxClusterIDLength bytes, without "kuik-" in it (so that no cluster's suffix ends
// another's: "-kuik-b" ends "-kuik-a-kuik-b" and "-kuik-kuik-b").
func ValidateClusterID(id string) error {
	if len(id) > MaxClusterIDLength {
		return fmt.Errorf("%q is longer than %d bytes", id, MaxClusterIDLength)
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("%q: %s", id, errs[0])
	}
	if strings.Contains(id, ClusterTagInfix[1:]) {
		return fmt.Errorf("%q must not contain %q", id, ClusterTagInfix[1:])
	}
	return nil
}

// ClusterTag is the tag a mirror holds tag under for the cluster clusterID: tag itself without a
// cluster ID, else tag + "-kuik-" + clusterID. An image without a tag (digest only) has none
// under any cluster: "" stays "". The error is ErrClusterTagTooLong, or says the cluster ID is
// not valid ([ValidateClusterID]).
func ClusterTag(tag, clusterID string) (string, error) {
	if clusterID == "" || tag == "" {
		return tag, nil
	}
	if err := ValidateClusterID(clusterID); err != nil {
		return "", err
	}
	if !clusterTagFits(tag, clusterID) {
		return "", ErrClusterTagTooLong
	}
	return tag + ClusterTagInfix + clusterID, nil
}

// IsClusterTag reports whether a mirror's tag is one ClusterTag made for clusterID: it ends
// with "-kuik-" + clusterID after at least one byte of the image's tag. Always false without a
// cluster ID.
func IsClusterTag(tag, clusterID string) bool {
	if clusterID == "" {
		return false
	}
	rest, ok := strings.CutSuffix(tag, clusterID)
	return ok && len(rest) > len(ClusterTagInfix) && strings.HasSuffix(rest, ClusterTagInfix)
}

func clusterTagFits(tag, clusterID string) bool {
	return len(tag)+len(ClusterTagInfix)+len(clusterID) <= maxTagLength
}
