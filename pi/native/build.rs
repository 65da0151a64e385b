fn main() {
    napi_build::setup();
    // macOS: the addon records only the libraries it calls into. Rust's standard library
    // asks to link libiconv on Apple targets, which the addon never calls; without this it
    // would load libiconv and libcharset beside libSystem (tests/pi_platforms.rs checks).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-dead_strip_dylibs");
    }
}
