package routing

import "github.com/enix/kuik/pkg/apis/kuik/v1alpha1"

// Bounds of a pod kuik routes. The API server admits pods far larger (thousands of labels,
// images of any length), and any pod author may label one kuik.enix.io/rewritten=true, which
// puts it in the secret-syncer's cache: so the webhook leaves a pod over these bounds as it is,
// and the secret-syncer counts such a pod as not rewritten and keeps nothing of it. What the
// syncer keeps of a pod is then bounded whatever its author writes.
const (
	// MaxPodLabels bounds the number of a pod's labels (podSelector reads them all).
	MaxPodLabels = 128
	// MaxPodLabelBytes bounds the size of a pod's labels, keys and values.
	MaxPodLabelBytes = 16 << 10
	// MaxRecordBytes bounds kuik's records on a pod: for every rewritten container, its name,
	// original image, current image and resource ([RecordBytes]). 16 KiB is about twenty
	// containers rewritten to the longest images the reference grammar allows, or a hundred
	// of common length.
	MaxRecordBytes = 16 << 10
)

// LabelsWithinBounds reports whether a pod with these labels is one kuik routes. kuik's own
// label (v1alpha1.LabelRewritten) is not counted: the webhook checks the labels before it adds
// it, the syncer after (its informer selects on it), and both must give the same answer.
func LabelsWithinBounds(labels map[string]string) bool {
	count, n := 0, 0
	for k, v := range labels {
		if k == v1alpha1.LabelRewritten {
			continue
		}
		count++
		n += len(k) + len(v)
	}
	return count <= MaxPodLabels && n <= MaxPodLabelBytes
}

// RecordBytes is what one container's record counts towards MaxRecordBytes.
func RecordBytes(container, original, current string, by Source) int {
	return len(container) + len(original) + len(current) + len(by.Kind) + 1 + len(by.Name)
}
