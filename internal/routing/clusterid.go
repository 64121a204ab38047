package routing

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxClusterIDLength bounds a cluster ID: it is part of every kept tag (at most 128 bytes).
const MaxClusterIDLength = 32

// ValidateClusterID checks a cluster ID: a DNS label (lowercase letters, digits and '-') of at
// most MaxClusterIDLength bytes.
func ValidateClusterID(id string) error {
	if len(id) > MaxClusterIDLength {
		return fmt.Errorf("%q is longer than %d bytes", id, MaxClusterIDLength)
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("%q: %s", id, errs[0])
	}
	return nil
}
