package routing

import (
	"strings"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The paths of an entry in the Secret kuik injects: its auths key, and the path its credential is
// looked up for in its secretRef Secret.

// AlternativeAuthPath is the auths key of an ImageAlternative entry in the Secret kuik injects:
// its repository or repositoryGroup as written.
func AlternativeAuthPath(a *v1alpha1.Alternative) string {
	if a.RepositoryGroup != "" {
		return a.RepositoryGroup
	}
	return a.Repository
}

// MirrorAuthPath is the auths key of an ImageMirror in the Secret kuik injects: its
// destination.path without the trailing '/'.
func MirrorAuthPath(d *v1alpha1.MirrorDestination) string {
	return strings.TrimSuffix(d.Path, "/")
}

// AlternativeLookupPath is the registry path an ImageAlternative entry's credential is looked up
// for in its secretRef Secret, by the kubelet's rules: the repository itself, or for a group the
// path with its trailing '/', so that only auths keys matching every repository of the group
// count (a key for one repository below it does not).
func AlternativeLookupPath(a *v1alpha1.Alternative) string {
	if a.RepositoryGroup != "" {
		return withSlash(a.RepositoryGroup)
	}
	return a.Repository
}

// MirrorLookupPath is the registry path an ImageMirror's credential is looked up for in its
// secretRef Secret: destination.path with its trailing '/', so that a key written with the slash
// (registry.tld/mirror/) matches, as it does for the kubelet pulling any image under the mirror.
func MirrorLookupPath(d *v1alpha1.MirrorDestination) string {
	return withSlash(d.Path)
}

func withSlash(p string) string {
	if strings.HasSuffix(p, "/") {
		return p
	}
	return p + "/"
}
