package routing

// Repository returns the normalized repository of an image reference, without its tag or
// digest: docker.io/library/nginx for nginx, nginx:1.27 and nginx@sha256:…, so that a pod pinned
// by digest and one on a tag name the same repository.
func Repository(image string) (string, error) {
	ref, err := parseImage(image)
	if err != nil {
		return "", err
	}
	return ref.name, nil
}
