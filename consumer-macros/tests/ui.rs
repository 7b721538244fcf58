//! Pins what `#[handler]` accepts and what each misuse reports: the
//! diagnostics are part of the macro's interface.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
