// Package credentials reads and writes registry pull Secrets the way the kubelet reads them,
// and picks, for a registry path, the credential the kubelet would use.
//
// # Model
//
// A pull Secret (kubernetes.io/dockerconfigjson, or the legacy kubernetes.io/dockercfg) maps
// auths keys to credentials. [Parse] and [ParseSecret] turn one into a [DockerConfig]:
//
//   - only username, password and auth are read; auth is base64(user:password) and, when not
//     empty, replaces username and password (the kubelet's DockerConfigEntry.UnmarshalJSON in
//     pkg/credentialprovider/config.go);
//   - an entry the kubelet cannot decode (auth not base64, no ':' in it, a field of the wrong
//     JSON type, an entry that is not an object) is kept aside and reported by
//     [DockerConfig.Undecodable], never returned: the kubelet refuses the whole Secret when one
//     entry does not decode, so one such entry in a pod's pull Secrets fails every pull;
//   - an entry whose username is empty (after decoding auth) gives no credential and is never
//     returned either, though it still counts as a match.
//
// [DockerConfig.Lookup] applies the matching rules of the kubelet's BasicDockerKeyring
// (pkg/credentialprovider/keyring.go) to a registry path: an image repository such as
// quay.io/acme/foo or nginx, or a path prefix such as quay.io/acme/ (an ImageAlternative's
// repositoryGroup) or registry.tld/mirror (an ImageMirror's destination path). The path is
// normalized as the kubelet normalizes images (nginx is docker.io/library/nginx, see
// [NormalizePath]), and every auths key is read as a URL:
//
//   - a key without an http:// or https:// scheme is given https://, and a leading /v1/ or /v2/
//     of its path is dropped (so https://index.docker.io/v1/ is index.docker.io);
//   - key and path must have the same port (none only matches none) and the same number of host
//     labels, each label of the key being a filepath.Match pattern (*.example.com matches
//     a.example.com, neither example.com nor a.b.example.com); ports and paths hold no globs;
//   - the key's path must be a string prefix of the path's: quay.io/acme matches
//     quay.io/acme-tools/x, quay.io/acme/ does not;
//   - every matching key is a candidate, the most specific first (keys in reverse lexicographic
//     order); Lookup returns the first candidate that gives a credential;
//   - a key that reads as index.docker.io is used for a Docker Hub path only when no key matched
//     at all; a docker.io key matches Docker Hub paths directly.
//
// [Encode] writes the Secret kuik injects: a deterministic dockerconfigjson whose entries
// all decode.
//
// The package is pure: no Kubernetes client, no network, no clock.
package credentials
