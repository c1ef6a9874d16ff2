//! Compile-fail cases: illegal lifecycle transitions do not compile.
//!
//! Each case under `tests/ui/<topic>/` has a committed `.stderr`; after an intended change,
//! `TRYBUILD=overwrite cargo test --test ui` regenerates them (review the diff).

#[test]
fn illegal_lifecycle_transitions_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/lifecycle/*.rs");
}
