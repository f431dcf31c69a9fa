//! One patch to the Kotlin that uniffi 0.32 generates, for speed.
//!
//! The generated code allocates a new JNA `Structure` for the status of every call into Rust
//! (and a second one for the error buffer inside it). Each is native memory that JNA registers in
//! a global map and frees through a `Cleaner` after garbage collection. A lock cycle makes about
//! twenty calls, so this bookkeeping, the collector and the cleaner thread cost more than the
//! lock's round trips to the server (measured in bench/RESULTS.md, JVM section). The patch keeps
//! the statuses per thread and reuses them: calls nest (arguments are lowered through calls of
//! their own, errors are freed through one), so each thread keeps a small stack of them. It also
//! turns off JNA's copying of each status to and from native memory around every call (done by
//! reflection, field by field): only the code byte is written before and read after, and the
//! whole status is read only when the code says the call failed.
//!
//! The patch matches the template's text exactly and fails the build if it does not, so a
//! uniffi upgrade that changes the template cannot silently drop it.

use std::path::Path;

/// The status allocation in `uniffiRustCallWithError`, as uniffi 0.32.2 generates it.
const ALLOCATING_CALL: &str = "    var status = UniffiRustCallStatus()
    val return_value = callback(status)
    uniffiCheckCallStatus(errorHandler, status)
    return return_value
}
";

const POOLED_CALL: &str = "    val status = UniffiCallStatusPool.take()
    try {
        val return_value = callback(status)
        UniffiCallStatusPool.readBack(status)
        uniffiCheckCallStatus(errorHandler, status)
        return return_value
    } finally {
        UniffiCallStatusPool.give(status)
    }
}

// fencelock: call statuses are reused per thread instead of allocated per call (JNA native
// memory, freed by a Cleaner after GC, was the largest cost of a call). A stack, as calls nest.
// JNA does not copy them to and from native memory around each call (reflection, per field):
// the code byte is set before the call and read after it, and the rest only after an error.
private object UniffiCallStatusPool {
    private val free = ThreadLocal.withInitial { ArrayList<UniffiRustCallStatus>(4) }

    fun take(): UniffiRustCallStatus {
        val stack = free.get()
        val status = if (stack.isEmpty()) {
            UniffiRustCallStatus().also { it.setAutoSynch(false) }
        } else {
            stack.removeAt(stack.size - 1)
        }
        status.code = UNIFFI_CALL_SUCCESS
        // The code is the structure's first field: offset 0.
        status.pointer.setByte(0, UNIFFI_CALL_SUCCESS)
        return status
    }

    fun readBack(status: UniffiRustCallStatus) {
        if (status.pointer.getByte(0) != UNIFFI_CALL_SUCCESS) {
            status.read()
        }
    }

    fun give(status: UniffiRustCallStatus) {
        free.get().add(status)
    }
}
";

/// Applies the patch to every generated `.kt` file under `out_dir` that has the template.
pub fn patch_generated_kotlin(out_dir: &Path) -> Result<(), String> {
    let mut patched = 0;
    for file in kotlin_files(out_dir)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        if !text.contains("uniffiRustCallWithError") {
            continue;
        }
        let count = text.matches(ALLOCATING_CALL).count();
        if count != 1 {
            return Err(format!(
                "{}: expected the call-status template of uniffi 0.32.2 once, found it {count} times; \
                 update bindings/jvm/bindgen/src/patch.rs for this uniffi version",
                file.display()
            ));
        }
        std::fs::write(&file, text.replace(ALLOCATING_CALL, POOLED_CALL))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        patched += 1;
    }
    if patched == 0 {
        return Err(format!(
            "no generated Kotlin with uniffi calls under {}",
            out_dir.display()
        ));
    }
    Ok(())
}

fn kotlin_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut found = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            found.extend(kotlin_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "kt") {
            found.push(path);
        }
    }
    Ok(found)
}
