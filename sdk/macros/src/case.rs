//! serde's `rename_all` rules, applied as serde applies them.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(clippy::enum_variant_names)] // the names of serde's rules
pub enum RenameRule {
    LowerCase,
    UpperCase,
    PascalCase,
    CamelCase,
    SnakeCase,
    ScreamingSnakeCase,
    KebabCase,
    ScreamingKebabCase,
}

use RenameRule::*;

const RULES: &[(&str, RenameRule)] = &[
    ("lowercase", LowerCase),
    ("UPPERCASE", UpperCase),
    ("PascalCase", PascalCase),
    ("camelCase", CamelCase),
    ("snake_case", SnakeCase),
    ("SCREAMING_SNAKE_CASE", ScreamingSnakeCase),
    ("kebab-case", KebabCase),
    ("SCREAMING-KEBAB-CASE", ScreamingKebabCase),
];

impl RenameRule {
    pub fn parse(text: &str) -> Result<Self, String> {
        RULES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, rule)| *rule)
            .ok_or_else(|| {
                let names: Vec<String> = RULES.iter().map(|(n, _)| format!("{n:?}")).collect();
                format!(
                    "unknown rename rule {text:?}, expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// A variant name (`PascalCase` in Rust) as serde expects it.
    pub fn apply_to_variant(self, variant: &str) -> String {
        match self {
            PascalCase => variant.to_owned(),
            LowerCase => variant.to_ascii_lowercase(),
            UpperCase => variant.to_ascii_uppercase(),
            CamelCase => variant[..1].to_ascii_lowercase() + &variant[1..],
            SnakeCase => {
                let mut snake = String::new();
                for (i, ch) in variant.char_indices() {
                    if i > 0 && ch.is_uppercase() {
                        snake.push('_');
                    }
                    snake.push(ch.to_ascii_lowercase());
                }
                snake
            }
            ScreamingSnakeCase => SnakeCase.apply_to_variant(variant).to_ascii_uppercase(),
            KebabCase => SnakeCase.apply_to_variant(variant).replace('_', "-"),
            ScreamingKebabCase => ScreamingSnakeCase
                .apply_to_variant(variant)
                .replace('_', "-"),
        }
    }

    /// A field name (`snake_case` in Rust) as serde expects it.
    pub fn apply_to_field(self, field: &str) -> String {
        match self {
            LowerCase | SnakeCase => field.to_owned(),
            UpperCase | ScreamingSnakeCase => field.to_ascii_uppercase(),
            PascalCase => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            CamelCase => {
                let pascal = PascalCase.apply_to_field(field);
                pascal[..1].to_ascii_lowercase() + &pascal[1..]
            }
            KebabCase => field.replace('_', "-"),
            ScreamingKebabCase => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RenameRule::*;

    #[test]
    fn variants() {
        let v = "FooBar";
        assert_eq!(LowerCase.apply_to_variant(v), "foobar");
        assert_eq!(CamelCase.apply_to_variant(v), "fooBar");
        assert_eq!(SnakeCase.apply_to_variant(v), "foo_bar");
        assert_eq!(KebabCase.apply_to_variant(v), "foo-bar");
        assert_eq!(ScreamingSnakeCase.apply_to_variant(v), "FOO_BAR");
        assert_eq!(ScreamingKebabCase.apply_to_variant(v), "FOO-BAR");
    }

    #[test]
    fn fields() {
        let f = "foo_bar";
        assert_eq!(CamelCase.apply_to_field(f), "fooBar");
        assert_eq!(PascalCase.apply_to_field(f), "FooBar");
        assert_eq!(KebabCase.apply_to_field(f), "foo-bar");
        assert_eq!(ScreamingSnakeCase.apply_to_field(f), "FOO_BAR");
        assert_eq!(LowerCase.apply_to_field(f), "foo_bar");
    }
}
