//! The console's one style sheet, one script and its icon, compiled in: nothing to
//! build, nothing fetched from elsewhere (the page's policy allows only
//! these).

use axum::http::header;
use axum::response::IntoResponse;

/// `GET /static/console.css`.
pub(crate) async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/console.css"),
    )
}

/// `GET /static/console.js`.
pub(crate) async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../static/console.js"),
    )
}

/// `GET /static/favicon.svg`.
pub(crate) async fn icon() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../../static/favicon.svg"),
    )
}
