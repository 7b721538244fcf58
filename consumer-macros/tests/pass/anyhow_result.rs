//! `anyhow::Result<()>`: an alias with the error type left out.

use consumer::{PgTx, handler};

#[derive(serde::Deserialize)]
struct Signup {
    email: String,
}

#[handler(idempotency_key = signup.email)]
async fn welcome(signup: Signup, tx: &mut PgTx) -> anyhow::Result<()> {
    anyhow::ensure!(signup.email.contains('@'), "not an email address");
    sqlx::query("INSERT INTO welcomed (email) VALUES ($1)")
        .bind(&signup.email)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn assert_handler<H: consumer::Handler<consumer::PgStore>>(_: H) {}

pub fn main() {
    assert_handler(welcome);
}
