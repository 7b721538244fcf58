//! Pins what each misuse of `#[handler]` reports: the diagnostics are part
//! of the macro's interface. What it accepts is `tests/pass.rs`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
