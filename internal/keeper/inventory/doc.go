// Package inventory persists the keeper's [keep.Inventory] in ConfigMaps of the release
// namespace, so that it survives restarts and leader changes.
//
// # Layout
//
//	ConfigMap                              holds
//	kuik-keeper-inventory (the head)       generation, LastSweep, each shard's name, tag count, SHA-256
//	kuik-keeper-inventory-<gen>-<id>-<i>   one shard: its tags, gzip-compressed JSON in binaryData
//
// Every one is labelled app.kubernetes.io/managed-by=kuik-keeper and kuik.enix.io/inventory
// (head or shard). No name holds user input.
//
// # Guarantees
//
//   - A shard is at most [MaxShardBytes] compressed, far under the 1 MiB object limit.
//   - An inventory over [MaxTags] tags is refused, never truncated.
//   - Save writes the new shards, then the head, then deletes the shards the head no longer
//     names: a reader sees the old inventory or the new one, never a mix.
//   - Load reads the head, then exactly its shards; a missing or altered shard is an error,
//     never an empty inventory. No head is a first start: an empty inventory.
//   - Save replaces the head only at the resourceVersion Store last read or wrote: a deposed
//     leader gets [ErrConflict] and overwrites nothing.
//
// Rights needed in the namespace: get, list, create, update and delete on configmaps.
package inventory
