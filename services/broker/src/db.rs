//! The broker's one database: every domain's tables come from the same
//! migrations, applied in order, so a domain folder holds its SQL but not
//! its schema history.

use ithaca_kit::db::Migrations;
use sqlx::migrate::Migrator;

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// This service's migrations.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: &SQLITE,
    postgres: &POSTGRES,
    sqlite_page_size: None,
};
