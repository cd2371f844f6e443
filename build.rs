//! `sqlx::migrate!` embeds the migrations when the crate compiles, and
//! Cargo does not know it read them: a new migration alone would leave an
//! incremental build with the old set (sqlx's `migrate build-script`).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
