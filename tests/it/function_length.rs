//! The house's measures of `src/`, held: no function or method, nested ones
//! included, runs over [`MOST_LINES`] lines unless [`EXCEPTIONS`] names it
//! with its reason. Each file is parsed with syn, so a function is found
//! wherever it is written (in an impl, a trait, an inline module, another
//! function's body).

use std::path::Path;

use syn::visit::Visit;

/// The most lines a function may take, from `fn` to its closing brace: what
/// a reader holds at once; a longer one is split into named steps.
const MOST_LINES: usize = 120;

/// The functions allowed over [`MOST_LINES`] (file under `src/`, name as
/// the message shows it), each with its reason. An entry no longer needed
/// fails too, so the list only shrinks.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// Each function's name (with its impl's or trait's type) and where it
/// starts and ends, found by walking one file's syntax tree.
struct Functions {
    owner: Vec<String>,
    found: Vec<(String, usize, usize)>,
}

impl Functions {
    fn note(&mut self, sig: &syn::Signature, end: proc_macro2::Span) {
        let ident = &sig.ident;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{ident}"),
            None => ident.to_string(),
        };
        let start = sig.fn_token.span.start().line;
        self.found.push((name, start, end.end().line));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.note(&f.sig, f.block.brace_token.span.close());
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.note(&f.sig, f.block.brace_token.span.close());
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.note(&f.sig, block.brace_token.span.close());
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let ty = &i.self_ty;
        let owner = match &**ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.owner
            .push(owner.unwrap_or_else(|| format!("impl@{}", i.impl_token.span.start().line)));
        syn::visit::visit_item_impl(self, i);
        self.owner.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.owner.push(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.owner.pop();
    }
}

/// Every function of the source `text`: its name, first and last line.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let file = syn::parse_file(text).unwrap();
    let mut walk = Functions {
        owner: Vec::new(),
        found: Vec::new(),
    };
    walk.visit_file(&file);
    walk.found
}

#[test]
fn no_function_runs_over_120_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    super::layers::sources(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    let mut excused = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(&src).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for (name, start, end) in functions(&text) {
            let lines = end - start + 1;
            if lines <= MOST_LINES {
                continue;
            }
            if EXCEPTIONS.iter().any(|(f, n, _)| *f == shown && *n == name) {
                excused.push((shown.clone(), name));
                continue;
            }
            long.push(format!("src/{shown}:{start}: {name} takes {lines} lines"));
        }
    }
    for (file, name, _) in EXCEPTIONS {
        if !excused.iter().any(|(f, n)| f == file && n == name) {
            long.push(format!(
                "src/{file}: {name} is {MOST_LINES} lines or fewer, or gone: \
                 remove it from EXCEPTIONS"
            ));
        }
    }
    assert!(
        long.is_empty(),
        "a function over {MOST_LINES} lines is split into named steps \
         (or named in EXCEPTIONS with its reason):\n{}",
        long.join("\n")
    );
}

#[test]
fn functions_are_found_in_impls_traits_and_bodies() {
    let text = "fn a() {\n    fn inner() {}\n}\nimpl S {\n    fn m(&self) {\n    }\n}\n\
                trait T {\n    fn d() {}\n    fn r();\n}\nmod m {\n    fn b() {}\n}\n";
    let found: Vec<String> = functions(text)
        .into_iter()
        .map(|(name, start, end)| format!("{name} {start}-{end}"))
        .collect();
    assert_eq!(
        found,
        ["a 1-3", "inner 2-2", "S::m 5-6", "T::d 9-9", "b 13-13"]
    );
}
