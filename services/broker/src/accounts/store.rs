//! The `accounts` table's SQL, one text for SQLite and PostgreSQL.

use ithaca_kit::db::Db;
use ithaca_kit::with_pool;

/// A provider account. `config` and `credential` are sealed
/// and never leave this crate.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct AccountRow {
    pub account_id: String,
    pub tenant_id: String,
    pub provider: String,
    pub label: String,
    /// The connection details (a JSON object), sealed like the credential.
    pub config: String,
    /// The sealed credential, when one is configured.
    pub credential: Option<String>,
    pub created_at_ms: i64,
}

/// The `accounts` table.
#[derive(Clone, Debug)]
pub struct AccountStore {
    db: Db,
}

impl AccountStore {
    pub fn new(db: Db) -> Self {
        AccountStore { db }
    }

    pub async fn insert_account(&self, a: &AccountRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO accounts (account_id, tenant_id, provider, label, config, credential, created_at_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7)";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(&a.account_id)
            .bind(&a.tenant_id)
            .bind(&a.provider)
            .bind(&a.label)
            .bind(&a.config)
            .bind(&a.credential)
            .bind(a.created_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn accounts(&self, tenant_id: &str) -> Result<Vec<AccountRow>, sqlx::Error> {
        let sql = "SELECT account_id, tenant_id, provider, label, config, credential, created_at_ms FROM accounts \
                   WHERE tenant_id = $1 ORDER BY created_at_ms, account_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, AccountRow>(sql).bind(tenant_id).fetch_all(pool).await)
    }

    /// Rewrite account configs in one transaction: `rewrite` sees each
    /// `(account_id, config)` and returns the new config, or `None` to leave
    /// it. A row changed meanwhile (another replica rewrote it first) is
    /// left alone. Returns how many rows changed.
    pub async fn rewrite_account_configs(
        &self,
        rewrite: impl Fn(&str, &str) -> Option<String>,
    ) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let select = "SELECT account_id, config FROM accounts ORDER BY account_id";
        let update = "UPDATE accounts SET config = $1 WHERE account_id = $2 AND config = $3";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let rows: Vec<(String, String)> = sqlx::query_as(select).fetch_all(&mut *tx).await?;
            let mut changed = 0;
            for (account_id, config) in rows {
                let Some(new) = rewrite(&account_id, &config) else {
                    continue;
                };
                changed += sqlx::query(update)
                    .bind(new)
                    .bind(&account_id)
                    .bind(&config)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(changed)
        })
    }
}
