//! The accounts domain: each tenant's provider accounts, with connection
//! details and credentials sealed at rest and never returned.
//!
//! - [`service`]: adding and listing accounts, opening their configs, and
//!   sealing configs written before they were sealed.
//! - [`store`]: the `accounts` table.
//! - [`vault`]: the sealing itself; alert brokers' credentials and altdata
//!   are sealed with it too.

pub mod service;
pub mod store;
pub mod vault;

pub use service::AccountService;
pub use store::AccountStore;
