package webhook

// BuildIndex is buildIndex, for the tests of the index Run builds.
var BuildIndex = buildIndex

// PodAdmission is podAdmission, for the benchmarks.
var PodAdmission = podAdmission
