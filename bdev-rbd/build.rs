//! Links librbd and librados (Debian: librbd-dev, librados-dev). The declarations of the few
//! functions used are written by hand in `src/ffi.rs`; no bindgen, no headers at build time.

fn main() {
    println!("cargo:rustc-link-lib=dylib=rbd");
    println!("cargo:rustc-link-lib=dylib=rados");
    println!("cargo:rerun-if-changed=build.rs");
}
