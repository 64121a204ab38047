// Package ctrlkit holds what the secret-syncer and the keeper share to build their
// controller-runtime manager:
//
//   - ManagerOptions: the metrics and health-probe addresses and the leader election settings,
//     embedded in syncer.Options and keeper.Options;
//   - their flags (BindFlags) and the checks naming them (ValidateFlags), for both binaries'
//     app packages;
//   - NewManager: the manager those settings describe;
//   - NewEventRecorder: a clientset and a core/v1 event recorder stopped with the manager.
//
// What differs stays with each binary: the namespace of the Lease, the caches, the Lease's
// default name, the component name, and the keeper's watch-error handler.
package ctrlkit
