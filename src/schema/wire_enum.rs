//! The one definition of a closed set of wire strings as a Rust enum.
//!
//! Each wire string is written once, beside its variant: serde's rename (when the enum is
//! serialised), `as_str`, `ALL`, the strict `FromStr` and `Display` all come from that one
//! spelling, so they cannot drift apart.

/// Declares a fieldless enum whose variants map one-to-one to wire strings.
///
/// After the enum, `kind = "<what>";` makes a string outside the set a
/// `SchemaError::UnknownValue` of that kind; `parse_error(|s| ..);` builds another error. Write
/// `serde` before `enum` to also give every variant `#[serde(rename = "<wire>")]` (the enum must
/// then derive `Serialize`/`Deserialize`). `ALL` lists the variants in declaration order, so the
/// declaration order is the order callers iterate in (metrics, CRD enum lists).
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis serde enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $wire:literal,)+
        }
        $($how:tt)+
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant,)+
        }
        $crate::schema::wire_enum::wire_enum!(@impls $name [$($variant = $wire),+] $($how)+);
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $wire:literal,)+
        }
        $($how:tt)+
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
        }
        $crate::schema::wire_enum::wire_enum!(@impls $name [$($variant = $wire),+] $($how)+);
    };
    (@impls $name:ident [$($variants:tt)+] kind = $kind:literal;) => {
        $crate::schema::wire_enum::wire_enum!(@impls $name [$($variants)+] parse_error(|s| {
            $crate::schema::SchemaError::UnknownValue {
                kind: $kind,
                value: s.to_owned(),
            }
        }););
    };
    (
        @impls $name:ident [$($variant:ident = $wire:literal),+]
        parse_error(|$s:ident| $err:expr);
    ) => {
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The wire spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::schema::SchemaError;

            /// Strict: only the wire strings, spelled exactly.
            fn from_str($s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .into_iter()
                    .find(|v| v.as_str() == $s)
                    .ok_or_else(|| $err)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use wire_enum;
