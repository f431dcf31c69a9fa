//! uniffi-bindgen at the exact uniffi version of the JVM crate, so the generated Kotlin always
//! matches the scaffolding compiled into `libfencelock_jvm.so`; then fencelock's patches to the
//! generated Kotlin (`patch.rs`).

mod patch;

fn main() {
    uniffi::uniffi_bindgen_main();
    if let Some(out_dir) = out_dir_argument(std::env::args())
        && let Err(message) = patch::patch_generated_kotlin(std::path::Path::new(&out_dir))
    {
        eprintln!("uniffi-bindgen (fencelock): {message}");
        std::process::exit(1);
    }
}

/// The value of `--out-dir DIR` or `--out-dir=DIR`, when generating.
fn out_dir_argument(args: impl Iterator<Item = String>) -> Option<String> {
    let args: Vec<String> = args.collect();
    if !args.iter().any(|a| a == "generate") {
        return None;
    }
    args.iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix("--out-dir") {
            Some("") => args.get(i + 1).cloned(),
            Some(rest) => rest.strip_prefix('=').map(str::to_string),
            None => None,
        })
}
