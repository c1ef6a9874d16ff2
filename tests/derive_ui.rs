//! Compile-time checks of `#[derive(Adapter)]` and `#[derive(AdapterOptions)]`.
//!
//! Each case under `tests/ui/derive/` is a mistake with a committed `.stderr` that must say
//! what is wrong and what would be right; the cases under `tests/ui/derive/pass/` compile and
//! run. After an intended change, `TRYBUILD=overwrite cargo test --test derive_ui` regenerates
//! the `.stderr` files (read the diff).

#[test]
fn derive_mistakes_do_not_compile_and_say_how_to_fix_them() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/derive/*.rs");
    t.pass("tests/ui/derive/pass/*.rs");
}
