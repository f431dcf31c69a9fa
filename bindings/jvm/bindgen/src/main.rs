//! uniffi-bindgen at the exact uniffi version of the JVM crate, so the generated Kotlin always
//! matches the scaffolding compiled into `libfencelock_jvm.so`.

fn main() {
    uniffi::uniffi_bindgen_main()
}
