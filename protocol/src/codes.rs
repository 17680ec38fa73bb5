//! How a set of stable wire codes is declared: a snake_case string enum
//! with every code listed once (`ALL`), its spelling (`as_str`), and — for
//! a set a newer server may extend — a fallback that a code this build does
//! not know reads as. [`crate::RefusalCode`] and [`crate::ErrorCode`] are
//! declared with it.

/// Declares `$name` with each `$variant = $text`, and `$other` for an
/// unknown code when given (`unknown: Other`).
macro_rules! wire_codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident $(, unknown: $other:ident)? {
            $($(#[$doc:meta])* $variant:ident = $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash,
            serde::Serialize, serde::Deserialize, schemars::JsonSchema,
        )]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$doc])* $variant,)*
            $(
                /// A code this build does not know (read only; never sent).
                #[serde(other)]
                $other,
            )?
        }

        impl $name {
            /// Every code this build sends, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The code as the wire spells it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                    $($name::$other => "other",)?
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

pub(crate) use wire_codes;

#[cfg(test)]
mod tests {
    use crate::{ErrorCode, RefusalCode};

    /// Each code of `all` is written as its string and read back as itself.
    fn round_trip<T>(all: &[T], as_str: fn(T) -> &'static str)
    where
        T: Copy + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
    {
        for &code in all {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", as_str(code)));
            assert_eq!(serde_json::from_str::<T>(&json).unwrap(), code);
        }
    }

    #[test]
    fn every_code_round_trips_as_its_string() {
        round_trip(RefusalCode::ALL, RefusalCode::as_str);
        round_trip(ErrorCode::ALL, ErrorCode::as_str);
    }
}
