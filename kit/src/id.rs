//! Typed ids and typed text values.
//!
//! An id crosses a service boundary as text; inside a service it is a
//! newtype that can only be built by parsing, so a function that takes a
//! [`TenantId`] never has to ask whether the text was checked. The ids here
//! are the ones every service shares because the principal assertion carries
//! them; ids a single service owns (run ids, key ids) are declared in that
//! service's `model.rs` with [`string_id!`](crate::string_id).
//!
//! [`text_enum!`](crate::text_enum) does the same for closed sets of names
//! stored as text (statuses): one place lists each variant's name.

use crate::error::ServiceError;
use crate::principal::Principal;

/// Text that is not a valid value of a typed id or name, read back from a
/// database (a row that no code path could have written).
#[derive(Debug, thiserror::Error)]
#[error("{kind}: invalid value {value:?}")]
pub struct InvalidText {
    pub kind: &'static str,
    pub value: String,
}

/// Declare a newtype over `String` whose only constructor is `parse`.
///
/// `$check` is a `fn(&str) -> Option<String>` returning the canonical form,
/// and `$error` the message (starting with the field's name) of the
/// INVALID_ARGUMENT answer when it returns `None`. The type derefs to `str`,
/// so it reads like the text it wraps.
#[macro_export]
macro_rules! string_id {
    ($(#[$meta:meta])* $vis:vis struct $name:ident; check = $check:expr; error = $error:expr;) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis struct $name(String);

        impl $name {
            /// Check `raw` and keep its canonical form.
            pub fn parse(raw: &str) -> Result<Self, $crate::error::ServiceError> {
                let check: fn(&str) -> Option<String> = $check;
                check(raw)
                    .map($name)
                    .ok_or_else(|| $crate::error::ServiceError::invalid($error))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl ::std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        /// For reading rows (`#[sqlx(try_from = "String")]`).
        impl TryFrom<String> for $name {
            type Error = $crate::id::InvalidText;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                let check: fn(&str) -> Option<String> = $check;
                check(&value).map($name).ok_or($crate::id::InvalidText {
                    kind: stringify!($name),
                    value,
                })
            }
        }
    };
}

/// Declare a `Copy` enum stored and shown as text: `as_str`, `parse`,
/// `Display`, comparison with text, and `TryFrom<String>` for rows.
#[macro_export]
macro_rules! text_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value named `text`, if any.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        /// For reading rows (`#[sqlx(try_from = "String")]`).
        impl TryFrom<String> for $name {
            type Error = $crate::id::InvalidText;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $name::parse(&value).ok_or($crate::id::InvalidText {
                    kind: stringify!($name),
                    value,
                })
            }
        }
    };
}

/// The canonical (lowercase, hyphenated) form of a UUID.
pub fn canonical_uuid(raw: &str) -> Option<String> {
    uuid::Uuid::parse_str(raw.trim())
        .ok()
        .map(|u| u.hyphenated().to_string())
}

fn non_empty(raw: &str) -> Option<String> {
    (!raw.is_empty()).then(|| raw.to_owned())
}

string_id! {
    /// The tenant every query is filtered by. Any non-empty text: tenants
    /// created by the auth service have UUIDs, tests and the local stack
    /// use readable names.
    pub struct TenantId;
    check = non_empty;
    error = "tenant_id: required";
}

string_id! {
    /// A research session (a UUID, owned by the session service).
    pub struct SessionId;
    check = canonical_uuid;
    error = "session_id: not a session id (expected a UUID)";
}

impl TenantId {
    /// The caller's own tenant; a caller without one is refused.
    pub fn of(caller: &Principal) -> Result<TenantId, ServiceError> {
        if caller.tenant_id().is_empty() {
            return Err(ServiceError::denied("the caller has no tenant"));
        }
        Ok(TenantId(caller.tenant_id().to_owned()))
    }
}

impl SessionId {
    /// A fresh id.
    pub fn new_v4() -> SessionId {
        SessionId(uuid::Uuid::new_v4().hyphenated().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    text_enum! {
        enum Colour {
            Red = "red",
            DarkBlue = "dark_blue",
        }
    }

    #[test]
    fn ids_parse_to_a_canonical_form() {
        let upper = "9B2F7C1E-8D4A-4C3B-9F0E-1A2B3C4D5E6F";
        let id = SessionId::parse(upper).expect("a uuid");
        assert_eq!(id, "9b2f7c1e-8d4a-4c3b-9f0e-1a2b3c4d5e6f");
        let err = SessionId::parse("sess_01HQ").expect_err("not a uuid");
        assert!(err.message.starts_with("session_id"), "{}", err.message);
        assert!(TenantId::parse("").is_err());
        assert!(SessionId::try_from("x".to_owned()).is_err());
        let caller = Principal::system("");
        assert!(TenantId::of(&caller).is_err());
    }

    #[test]
    fn text_enums_round_trip() {
        for colour in Colour::ALL {
            assert_eq!(Colour::parse(colour.as_str()), Some(*colour));
            assert_eq!(
                Colour::try_from(colour.to_string()).expect("round trip"),
                *colour
            );
        }
        assert_eq!(Colour::DarkBlue, "dark_blue");
        assert!(Colour::parse("green").is_none());
    }
}
