//! Where locks live in the tree, and what their nodes hold: Apache Curator's protected
//! `InterProcessMutex` layout, so Curator clients queue with fencelock's. The read-write lock's
//! and the semaphore's nodes live in the same folder of the name ([`rwlock`](super::rwlock),
//! [`semaphore`](super::semaphore)), named and filled the same way.
//!
//! ```text
//! [/chroot]/fencelock/<encoded name>/_c_<owner id as a UUID>-lock-<10-digit sequence>
//! ```
//!
//! The folder per lock is a CONTAINER node (the server deletes it once empty); lock nodes are
//! EPHEMERAL_SEQUENTIAL. Node data is JSON with the layout version and the holder's
//! description; Curator writes the client's IP address there instead, and both are read.

use serde_json::Value;

use crate::ids::OwnerId;
use crate::name::LockName;

/// The version written into node data.
pub const LAYOUT_VERSION: u64 = 1;
/// Curator's lock name for `InterProcessMutex` (`LockInternals` with `"lock-"`).
pub const LOCK_LABEL: &str = "lock-";
/// Curator's protected-mode prefix.
const PROTECTED: &str = "_c_";

/// The folder that holds the queue of one lock.
pub fn lock_folder(root: &str, name: &LockName) -> String {
    format!("{root}/{}", name.encoded())
}

/// The path to create (the server appends the sequence) for `owner`'s node labelled `label`
/// (`lock-` for the mutex, [`LOCK_LABEL`]).
pub fn node_prefix(folder: &str, owner: OwnerId, label: &str) -> String {
    format!("{folder}/{}{label}", owner_prefix(owner))
}

/// `_c_<uuid>-`: how every node of `owner` starts, whatever the recipe (Curator's protected
/// mode); the owner id is new for each acquisition, so it names one node per folder.
pub fn owner_prefix(owner: OwnerId) -> String {
    format!("{PROTECTED}{}-", owner.to_uuid_string())
}

/// The sequence of a lock node's name, read the way Curator does (what follows the last
/// `lock-`); `None` for children that are not lock nodes.
pub fn sequence(child: &str) -> Option<i64> {
    sequence_after(child, LOCK_LABEL)
}

/// What follows the last `label` in `child`, as a sequence: digits only, and not past 2^31
/// (ZooKeeper's per-folder counter is a signed int, spelled with a `-` once it wraps).
pub fn sequence_after(child: &str, label: &str) -> Option<i64> {
    let at = child.rfind(label)?;
    let digits = &child[at + label.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order: `(sequence, name)`.
pub fn queue(children: Vec<String>) -> Vec<(i64, String)> {
    let mut nodes: Vec<(i64, String)> = children
        .into_iter()
        .filter_map(|c| sequence(&c).map(|s| (s, c)))
        .collect();
    nodes.sort();
    nodes
}

/// Node data: `{"fencelock":1,"holder":{…}}`.
pub fn node_data(holder_json: &str) -> Vec<u8> {
    let holder: Value = serde_json::from_str(holder_json)
        .unwrap_or_else(|_| Value::String(holder_json.to_string()));
    serde_json::json!({ "fencelock": LAYOUT_VERSION, "holder": holder })
        .to_string()
        .into_bytes()
}

/// The holder's description from node data: fencelock's JSON, or what a Curator client wrote
/// (its IP address) wrapped as `{"curator":"…"}`.
pub fn holder_from_data(data: &[u8]) -> Option<String> {
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data)
        && map.contains_key("fencelock")
    {
        return map.get("holder").map(|h| h.to_string());
    }
    if data.is_empty() {
        return None;
    }
    Some(serde_json::json!({ "curator": String::from_utf8_lossy(data) }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_sequence_is_not_a_lock_node() {
        // What ZooKeeper names the 2^31st child of a folder: its counter is a signed int.
        assert_eq!(sequence("_c_x-lock--2147483648"), None);
        assert_eq!(sequence("_c_x-lock-2147483647"), Some(2_147_483_647));
    }

    #[test]
    fn curator_names_and_order() {
        let owner = OwnerId::from_bytes([0xab; 16]);
        let name = LockName::new("batch/2024.nightly").unwrap();
        let folder = lock_folder("/fencelock", &name);
        assert_eq!(folder, "/fencelock/batch%2F2024%2Enightly");
        assert_eq!(
            node_prefix(&folder, owner, LOCK_LABEL),
            "/fencelock/batch%2F2024%2Enightly/_c_abababab-abab-abab-abab-abababababab-lock-"
        );
        assert_eq!(
            sequence("_c_abababab-abab-abab-abab-abababababab-lock-0000000042"),
            Some(42)
        );
        assert_eq!(sequence("lock-0000000007"), Some(7));
        assert_eq!(sequence("unrelated"), None);
        assert_eq!(sequence("_c_x-lock-"), None);
        let q = queue(vec![
            "_c_b-lock-0000000010".into(),
            "junk".into(),
            "_c_a-lock-0000000002".into(),
            "_c_c-lock-2147483648".into(),
        ]);
        let names: Vec<&str> = q.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "_c_a-lock-0000000002",
                "_c_b-lock-0000000010",
                "_c_c-lock-2147483648"
            ]
        );
    }

    #[test]
    fn data_round_trips_and_curator_data_is_shown() {
        let data = node_data(r#"{"host":"h","pid":1}"#);
        assert!(
            String::from_utf8(data.clone())
                .unwrap()
                .contains("\"fencelock\":1")
        );
        assert_eq!(holder_from_data(&data).unwrap(), r#"{"host":"h","pid":1}"#);
        assert_eq!(
            holder_from_data(b"10.0.0.7").unwrap(),
            r#"{"curator":"10.0.0.7"}"#
        );
        assert_eq!(holder_from_data(b""), None);
    }
}
