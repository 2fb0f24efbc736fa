//! LaTeX and plain math into an [`Expr`], bounded in depth and in work.

use super::expr::{Budget, Expr, Func, Rel};
use super::value::Rational;

/// Deepest nesting the parser follows.
pub const MAX_DEPTH: usize = 100;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(String),
    Letter(char),
    Greek(&'static str),
    Pi,
    Inf,
    EmptySet,
    Func(Func),
    Log,
    Sqrt,
    Frac,
    Binom,
    Plus,
    Minus,
    Star,
    Slash,
    Caret,
    Underscore,
    Bang,
    Percent,
    PlusMinus,
    MinusPlus,
    LParen,
    RParen,
    LBrack,
    RBrack,
    LBrace,
    RBrace,
    SetOpen,
    SetClose,
    Bar,
    Comma,
    Semicolon,
    Amp,
    RowSep,
    Rel(Rel),
    Cup,
    SetMinus,
    Or,
    Approx,
    MatBegin,
    MatEnd,
    Degree,
    FloorOpen,
    FloorClose,
    CeilOpen,
    CeilClose,
    Reals,
}

const GREEK: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "zeta",
    "eta",
    "theta",
    "vartheta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "varphi",
    "chi",
    "psi",
    "omega",
    "Gamma",
    "Delta",
    "Theta",
    "Lambda",
    "Xi",
    "Sigma",
    "Phi",
    "Psi",
    "Omega",
];

const FUNCS: &[(&str, Func)] = &[
    ("arcsin", Func::Asin),
    ("arccos", Func::Acos),
    ("arctan", Func::Atan),
    ("sinh", Func::Sinh),
    ("cosh", Func::Cosh),
    ("tanh", Func::Tanh),
    ("sin", Func::Sin),
    ("cos", Func::Cos),
    ("tan", Func::Tan),
    ("cot", Func::Cot),
    ("sec", Func::Sec),
    ("csc", Func::Csc),
    ("ln", Func::Ln),
    ("exp", Func::Exp),
    ("abs", Func::Abs),
];

/// Commands that change only presentation.
const IGNORED: &[&str] = &[
    "left",
    "right",
    "big",
    "Big",
    "bigg",
    "Bigg",
    "bigl",
    "bigr",
    "Bigl",
    "Bigr",
    "displaystyle",
    "textstyle",
    "quad",
    "qquad",
    "mathrm",
    "mathbf",
    "mathit",
    "boldsymbol",
    "limits",
    "circ",
    "degree",
    "dagger",
    // `\angle ABC = 20^\circ` names an angle by its points.
    "angle",
    "measuredangle",
];

fn command(name: &str) -> Option<Tok> {
    if let Some((_, f)) = FUNCS.iter().find(|(n, _)| *n == name) {
        return Some(Tok::Func(*f));
    }
    if let Some(g) = GREEK.iter().find(|g| **g == name) {
        return Some(Tok::Greek(g));
    }
    Some(match name {
        "pi" => Tok::Pi,
        "infty" | "infinity" => Tok::Inf,
        "emptyset" | "varnothing" => Tok::EmptySet,
        "log" | "lg" => Tok::Log,
        "sqrt" => Tok::Sqrt,
        "frac" | "dfrac" | "tfrac" | "cfrac" => Tok::Frac,
        "binom" | "dbinom" | "tbinom" | "choose" => Tok::Binom,
        "cdot" | "times" | "ast" => Tok::Star,
        "div" => Tok::Slash,
        "pm" => Tok::PlusMinus,
        "mp" => Tok::MinusPlus,
        "le" | "leq" | "leqslant" | "leqq" => Tok::Rel(Rel::Le),
        "ge" | "geq" | "geqslant" | "geqq" => Tok::Rel(Rel::Ge),
        "lt" => Tok::Rel(Rel::Lt),
        "gt" => Tok::Rel(Rel::Gt),
        "ne" | "neq" => Tok::Rel(Rel::Ne),
        "in" => Tok::Rel(Rel::In),
        "equiv" => Tok::Rel(Rel::Eq),
        "approx" | "simeq" => Tok::Approx,
        "cup" => Tok::Cup,
        "setminus" | "backslash" => Tok::SetMinus,
        "lor" | "vee" => Tok::Or,
        "lbrace" => Tok::SetOpen,
        "rbrace" => Tok::SetClose,
        "vert" | "lvert" | "rvert" | "mid" => Tok::Bar,
        "langle" => Tok::LParen,
        "rangle" => Tok::RParen,
        "lfloor" => Tok::FloorOpen,
        "rfloor" => Tok::FloorClose,
        "lceil" => Tok::CeilOpen,
        "rceil" => Tok::CeilClose,
        _ => return None,
    })
}

/// Splits normalised text into tokens; `None` on anything unknown.
fn lex(text: &str, budget: &mut Budget) -> Option<Vec<Tok>> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        budget.spend(1).ok()?;
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // Scientific notation: 1.5e3, 2E-4 (only when digits follow).
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                let mut j = i + 1;
                if j < chars.len() && matches!(chars[j], '+' | '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            toks.push(Tok::Num(chars[start..i].iter().collect()));
            continue;
        }
        if c == '\\' {
            let next = *chars.get(i + 1)?;
            if next.is_ascii_alphabetic() {
                let start = i + 1;
                i = start;
                while i < chars.len() && chars[i].is_ascii_alphabetic() {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name == "begin" || name == "end" {
                    // \begin{pmatrix} and friends.
                    let rest: String = chars[i..].iter().take(20).collect();
                    let env = ["pmatrix", "bmatrix", "matrix", "Bmatrix", "smallmatrix", "array"]
                        .iter()
                        .find(|e| rest.starts_with(&format!("{{{e}}}")))?;
                    i += env.len() + 2;
                    if *env == "array" && name == "begin" && chars.get(i) == Some(&'{') {
                        // Skip the column spec of an array.
                        while i < chars.len() && chars[i] != '}' {
                            i += 1;
                        }
                        i += 1;
                    }
                    toks.push(if name == "begin" { Tok::MatBegin } else { Tok::MatEnd });
                    continue;
                }
                if name == "mathbb" {
                    let rest: String = chars[i..].iter().take(3).collect();
                    if rest == "{R}" {
                        i += 3;
                        toks.push(Tok::Reals);
                        continue;
                    }
                    return None;
                }
                if IGNORED.contains(&name.as_str()) {
                    continue;
                }
                toks.push(command(&name)?);
                continue;
            }
            i += 2;
            match next {
                '{' => toks.push(Tok::SetOpen),
                '}' => toks.push(Tok::SetClose),
                '\\' => toks.push(Tok::RowSep),
                '%' => toks.push(Tok::Percent),
                '|' => toks.push(Tok::Bar),
                ',' | ';' | '!' | ':' | ' ' | '>' => {}
                _ => return None,
            }
            continue;
        }
        if c.is_ascii_alphabetic() {
            // Named functions and constants written without a backslash.
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphabetic() {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut rest = word.as_str();
            while !rest.is_empty() {
                budget.spend(1).ok()?;
                let known = ["sqrt", "infinity", "inf", "pi", "log"]
                    .iter()
                    .copied()
                    .chain(FUNCS.iter().map(|(n, _)| *n))
                    .find(|n| rest.starts_with(n));
                match known {
                    Some(name) => {
                        toks.push(match name {
                            "sqrt" => Tok::Sqrt,
                            "inf" | "infinity" => Tok::Inf,
                            "pi" => Tok::Pi,
                            "log" => Tok::Log,
                            _ => command(name)?,
                        });
                        rest = &rest[name.len()..];
                    }
                    None => {
                        toks.push(Tok::Letter(rest.chars().next()?));
                        rest = &rest[1..];
                    }
                }
            }
            continue;
        }
        i += 1;
        toks.push(match c {
            '+' => Tok::Plus,
            '-' | '−' | '–' => Tok::Minus,
            '*' | '×' | '·' => Tok::Star,
            '/' | '÷' | ':' => Tok::Slash,
            '^' => Tok::Caret,
            '_' => Tok::Underscore,
            // `x != 2` (but `5!=120` is a factorial equal to 120).
            '!' if chars.get(i) == Some(&'=')
                && !chars[..i - 1].last().is_some_and(|c| c.is_ascii_digit() || *c == ')') =>
            {
                i += 1;
                Tok::Rel(Rel::Ne)
            }
            '!' => Tok::Bang,
            '%' => Tok::Percent,
            '±' => Tok::PlusMinus,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '[' => Tok::LBrack,
            ']' => Tok::RBrack,
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '|' => Tok::Bar,
            ',' => Tok::Comma,
            ';' => Tok::Semicolon,
            '&' => Tok::Amp,
            // `=<` is how some write ≤.
            '=' if chars.get(i) == Some(&'<') => {
                i += 1;
                Tok::Rel(Rel::Le)
            }
            '=' => Tok::Rel(Rel::Eq),
            '<' => {
                if chars.get(i) == Some(&'=') {
                    i += 1;
                    Tok::Rel(Rel::Le)
                } else {
                    Tok::Rel(Rel::Lt)
                }
            }
            '>' => {
                if chars.get(i) == Some(&'=') {
                    i += 1;
                    Tok::Rel(Rel::Ge)
                } else {
                    Tok::Rel(Rel::Gt)
                }
            }
            '≤' | '⩽' => Tok::Rel(Rel::Le),
            '≥' | '⩾' => Tok::Rel(Rel::Ge),
            '≠' => Tok::Rel(Rel::Ne),
            '∈' => Tok::Rel(Rel::In),
            '∪' => Tok::Cup,
            '≈' => Tok::Approx,
            'π' => Tok::Pi,
            '∞' => Tok::Inf,
            '∅' => Tok::EmptySet,
            '°' => Tok::Degree,
            '√' => Tok::Sqrt,
            _ => return None,
        });
    }
    Some(toks)
}

struct Parser<'b> {
    toks: Vec<Tok>,
    pos: usize,
    depth: usize,
    budget: &'b mut Budget,
    /// A degree sign was read inside the argument of a trigonometric function.
    degrees: bool,
}

type P<T> = Option<T>;

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn next(&mut self) -> P<Tok> {
        self.budget.spend(1).ok()?;
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> P<T>) -> P<T> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    /// Comma- or semicolon-separated items up to (not including) a closing token.
    fn list(&mut self, closers: &[Tok]) -> P<Vec<Expr>> {
        self.list_or(closers).map(|(items, _)| items)
    }

    /// Items separated by commas, semicolons or "or" (`\lor`), and whether an "or" was one.
    fn list_or(&mut self, closers: &[Tok]) -> P<(Vec<Expr>, bool)> {
        let mut items = Vec::new();
        let mut or = false;
        if self.peek().is_some_and(|t| closers.contains(t)) {
            return Some((items, or));
        }
        loop {
            items.push(self.union()?);
            if self.eat(&Tok::Or) {
                or = true;
                continue;
            }
            if self.eat(&Tok::Comma) || self.eat(&Tok::Semicolon) {
                continue;
            }
            return Some((items, or));
        }
    }

    /// Unions and differences of sets, left to right: `A \cup B \setminus C` is `(A ∪ B) \ C`.
    fn union(&mut self) -> P<Expr> {
        let mut acc = self.relation()?;
        let mut parts = Vec::new();
        loop {
            if self.eat(&Tok::Cup) {
                parts.push(self.relation()?);
            } else if self.eat(&Tok::SetMinus) {
                if !parts.is_empty() {
                    acc = Expr::Union(std::iter::once(acc).chain(parts.drain(..)).collect());
                }
                let removed = self.relation()?;
                acc = Expr::Minus(Box::new(acc), Box::new(removed));
            } else {
                break;
            }
        }
        Some(if parts.is_empty() {
            acc
        } else {
            Expr::Union(std::iter::once(acc).chain(parts).collect())
        })
    }

    fn relation(&mut self) -> P<Expr> {
        let mut lhs = self.sum()?;
        loop {
            match self.peek().cloned() {
                Some(Tok::Rel(r)) => {
                    self.pos += 1;
                    let rhs = self.sum()?;
                    lhs = Expr::Rel(r, Box::new(lhs), Box::new(rhs));
                }
                // `\frac{1}{6} \approx 0.167` states 1/6: a rounding adds nothing to an exact
                // value; after a name (`x \approx 2.5`) it is the value given.
                Some(Tok::Approx) => {
                    self.pos += 1;
                    let rhs = self.sum()?;
                    let exact = |e: &Expr| {
                        let mut vars = std::collections::BTreeSet::new();
                        super::eval::symbols(e, &mut vars);
                        vars.is_empty()
                    };
                    let stated = match &lhs {
                        Expr::Rel(Rel::Eq, _, value) => exact(value),
                        other => exact(other),
                    };
                    if !stated {
                        lhs = Expr::Rel(Rel::Eq, Box::new(lhs), Box::new(rhs));
                    }
                }
                _ => return Some(lhs),
            }
        }
    }

    fn sum(&mut self) -> P<Expr> {
        let mut terms = vec![self.term()?];
        loop {
            match self.peek() {
                Some(Tok::Plus) => {
                    self.pos += 1;
                    terms.push(self.term()?);
                }
                Some(Tok::Minus) => {
                    self.pos += 1;
                    terms.push(Expr::Neg(Box::new(self.term()?)));
                }
                Some(Tok::PlusMinus | Tok::MinusPlus) => {
                    self.pos += 1;
                    let rest = self.term()?;
                    let base = if terms.len() == 1 {
                        terms.pop()?
                    } else {
                        Expr::Add(std::mem::take(&mut terms))
                    };
                    terms.push(Expr::PlusMinus(Box::new(base), Box::new(rest)));
                }
                _ => break,
            }
        }
        Some(if terms.len() == 1 { terms.pop()? } else { Expr::Add(terms) })
    }

    fn starts_atom(t: &Tok) -> bool {
        matches!(
            t,
            Tok::Num(_)
                | Tok::Letter(_)
                | Tok::Greek(_)
                | Tok::Pi
                | Tok::Inf
                | Tok::Func(_)
                | Tok::Log
                | Tok::Sqrt
                | Tok::Frac
                | Tok::Binom
                | Tok::LParen
                | Tok::LBrace
                | Tok::MatBegin
        )
    }

    fn term(&mut self) -> P<Expr> {
        let first = self.unary()?;
        // A mixed number: 2\frac{1}{2} or "2 1/2" is 5/2, not a product; -3\frac12 is -7/2.
        let (negative, whole) = match &first {
            Expr::Num(q) => (false, Some(q)),
            Expr::Neg(inner) => match &**inner {
                Expr::Num(q) => (true, Some(q)),
                _ => (false, None),
            },
            _ => (false, None),
        };
        if let Some(whole) = whole.filter(|q| q.is_integer() && !q.is_negative())
            && let Some(fraction) = self.mixed_fraction()
        {
            let mut mixed = Expr::Add(vec![Expr::Num(whole.clone()), fraction]);
            if self.eat(&Tok::Percent) {
                mixed = Expr::Percent(Box::new(mixed));
            }
            return Some(if negative { Expr::Neg(Box::new(mixed)) } else { mixed });
        }
        let mut factors = vec![first];
        loop {
            match self.peek() {
                Some(Tok::Star) => {
                    self.pos += 1;
                    factors.push(self.unary()?);
                }
                Some(Tok::Slash) => {
                    self.pos += 1;
                    let num = if factors.len() == 1 {
                        factors.pop()?
                    } else {
                        Expr::Mul(std::mem::take(&mut factors))
                    };
                    let den = self.unary()?;
                    factors.push(Expr::Div(Box::new(num), Box::new(den)));
                }
                Some(t) if Self::starts_atom(t) => factors.push(self.power()?),
                _ => break,
            }
        }
        Some(if factors.len() == 1 { factors.pop()? } else { Expr::Mul(factors) })
    }

    /// After an integer: `\frac{p}{q}` (or `\frac12`) with integer literals, followed by nothing
    /// that would make it a product. Decided by looking ahead, without consuming on failure.
    fn mixed_fraction(&mut self) -> P<Expr> {
        let digits = |t: Option<&Tok>| match t {
            Some(Tok::Num(n)) if n.bytes().all(|b| b.is_ascii_digit()) => Some(n.clone()),
            _ => None,
        };
        let at = |k: usize| self.toks.get(self.pos + k);
        let (num, den, len) = match at(0) {
            Some(Tok::Frac) if at(1) == Some(&Tok::LBrace) => {
                let num = digits(at(2))?;
                (at(3) == Some(&Tok::RBrace)
                    && at(4) == Some(&Tok::LBrace)
                    && at(6) == Some(&Tok::RBrace))
                .then_some(())?;
                (num, digits(at(5))?, 7)
            }
            Some(Tok::Frac) => {
                let both = digits(at(1)).filter(|n| n.len() == 2)?;
                (both[..1].to_owned(), both[1..].to_owned(), 2)
            }
            // "2 1/2": two numbers side by side only happen with a space between them.
            Some(Tok::Num(_)) if at(1) == Some(&Tok::Slash) => (digits(at(0))?, digits(at(2))?, 3),
            _ => return None,
        };
        let next = self.toks.get(self.pos + len);
        if next.is_some_and(|t| {
            Self::starts_atom(t) || matches!(t, Tok::Caret | Tok::Star | Tok::Slash)
        }) {
            return None;
        }
        let (num, den) = (Self::number(&num)?, Self::number(&den)?);
        if matches!(&num, Expr::Num(q) if q.is_zero())
            || matches!(&den, Expr::Num(q) if q.is_zero())
        {
            return None;
        }
        self.budget.spend(len as u64).ok()?;
        self.pos += len;
        Some(Expr::Div(Box::new(num), Box::new(den)))
    }

    fn unary(&mut self) -> P<Expr> {
        match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                self.nested(|p| p.unary().map(|e| Expr::Neg(Box::new(e))))
            }
            Some(Tok::Plus) => {
                self.pos += 1;
                self.nested(Self::unary)
            }
            Some(Tok::PlusMinus | Tok::MinusPlus) => {
                self.pos += 1;
                let e = self.nested(Self::unary)?;
                Some(Expr::PlusMinus(Box::new(Expr::Num(Rational::int(0))), Box::new(e)))
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> P<Expr> {
        let base = self.postfix()?;
        if self.eat(&Tok::Caret) {
            let exponent = self.nested(Self::exponent)?;
            let mut e = Expr::Pow(Box::new(base), Box::new(exponent));
            while self.eat(&Tok::Bang) {
                e = Expr::Factorial(Box::new(e));
            }
            return Some(e);
        }
        Some(base)
    }

    /// The exponent after `^`: a braced group, or one signed atom (`2^-1`, `x^2`, `e^{i\pi}`).
    fn exponent(&mut self) -> P<Expr> {
        match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                self.nested(Self::exponent).map(|e| Expr::Neg(Box::new(e)))
            }
            Some(Tok::Num(n)) if n.len() > 1 && !n.contains('.') => {
                // `x^23` in LaTeX is x²·3? No: TeX takes one character, but people mean 23.
                let n = n.clone();
                self.pos += 1;
                Self::number(&n)
            }
            _ => self.power(),
        }
    }

    fn postfix(&mut self) -> P<Expr> {
        let mut e = self.atom()?;
        loop {
            match self.peek() {
                Some(Tok::Bang) => {
                    self.pos += 1;
                    e = Expr::Factorial(Box::new(e));
                }
                Some(Tok::Percent) => {
                    self.pos += 1;
                    e = Expr::Percent(Box::new(e));
                }
                Some(Tok::Degree) => {
                    // Degrees mean something only inside a trigonometric function; elsewhere
                    // an angle is compared by its number (90° against 90).
                    self.pos += 1;
                    self.degrees = true;
                }
                _ => return Some(e),
            }
        }
    }

    fn number(text: &str) -> P<Expr> {
        match Rational::parse_decimal(text) {
            Some(q) => Some(Expr::Num(q)),
            None => text.parse::<f64>().ok().filter(|x| x.is_finite()).map(Expr::Float),
        }
    }

    /// One argument of a LaTeX command: a braced group, or a single character (`\frac12`).
    fn arg(&mut self) -> P<Expr> {
        match self.peek().cloned() {
            Some(Tok::LBrace) => {
                self.pos += 1;
                let e = self.nested(|p| p.union())?;
                self.eat(&Tok::RBrace).then_some(e)
            }
            Some(Tok::Num(n)) if n.len() > 1 => {
                // `\frac12`: one digit per argument.
                let (first, rest) = n.split_at(1);
                self.toks[self.pos] = Tok::Num(rest.to_owned());
                self.budget.spend(1).ok()?;
                Self::number(first)
            }
            _ => self.nested(Self::atom),
        }
    }

    /// The argument of a function such as `\sin`: a parenthesised or braced group, or else the
    /// following numbers and letters (`\cos 2x` is cos(2x); `\sin x \cos x` is sin(x)·cos(x)).
    fn func_arg(&mut self, trig: bool) -> P<Expr> {
        let outer = std::mem::replace(&mut self.degrees, false);
        let arg = if matches!(self.peek(), Some(Tok::LParen | Tok::LBrace)) {
            self.nested(Self::power)?
        } else {
            let mut factors = vec![self.nested(Self::power)?];
            while matches!(
                self.peek(),
                Some(Tok::Num(_) | Tok::Letter(_) | Tok::Greek(_) | Tok::Pi)
            ) {
                factors.push(self.nested(Self::power)?);
            }
            if factors.len() == 1 { factors.pop()? } else { Expr::Mul(factors) }
        };
        let in_degrees = std::mem::replace(&mut self.degrees, outer);
        Some(if trig && in_degrees {
            // sin 30° = sin(30·π/180)
            Expr::Mul(vec![
                arg,
                Expr::Pi,
                Expr::Div(
                    Box::new(Expr::Num(Rational::int(1))),
                    Box::new(Expr::Num(Rational::int(180))),
                ),
            ])
        } else {
            arg
        })
    }

    fn atom(&mut self) -> P<Expr> {
        let t = self.next()?;
        match t {
            Tok::Num(n) => Self::number(&n),
            Tok::Letter(c) => {
                let mut name = c.to_string();
                if self.eat(&Tok::Underscore) {
                    match self.next()? {
                        Tok::Num(n) => name.push_str(&format!("_{n}")),
                        Tok::Letter(l) => name.push_str(&format!("_{l}")),
                        Tok::LBrace => {
                            let mut sub = String::new();
                            while let Some(t) = self.next() {
                                match t {
                                    Tok::RBrace => break,
                                    Tok::Num(n) => sub.push_str(&n),
                                    Tok::Letter(l) => sub.push(l),
                                    _ => return None,
                                }
                            }
                            name.push_str(&format!("_{sub}"));
                        }
                        _ => return None,
                    }
                    return Some(Expr::Sym(name));
                }
                Some(match c {
                    'e' => Expr::E,
                    'i' => Expr::I,
                    _ => Expr::Sym(name),
                })
            }
            Tok::Greek(g) => Some(Expr::Sym(g.to_owned())),
            Tok::Pi => Some(Expr::Pi),
            Tok::Inf => Some(Expr::Inf),
            Tok::Reals => Some(Expr::Interval(
                Box::new(Expr::Neg(Box::new(Expr::Inf))),
                Box::new(Expr::Inf),
                false,
                false,
            )),
            Tok::FloorOpen | Tok::CeilOpen => {
                let (close, f) = if t == Tok::FloorOpen {
                    (Tok::FloorClose, Func::Floor)
                } else {
                    (Tok::CeilClose, Func::Ceil)
                };
                self.nested(|p| {
                    let inner = p.sum()?;
                    p.eat(&close).then(|| Expr::Apply(f, Box::new(inner)))
                })
            }
            Tok::EmptySet => Some(Expr::EmptySet),
            Tok::LParen => self.nested(|p| {
                let items = p.list(&[Tok::RParen, Tok::RBrack])?;
                match p.next()? {
                    Tok::RParen if items.len() == 1 => items.into_iter().next(),
                    Tok::RParen if !items.is_empty() => Some(Expr::Tuple(items)),
                    Tok::RBrack if items.len() == 2 => {
                        let mut it = items.into_iter();
                        Some(Expr::Interval(
                            Box::new(it.next()?),
                            Box::new(it.next()?),
                            false,
                            true,
                        ))
                    }
                    _ => None,
                }
            }),
            Tok::LBrack => self.nested(|p| {
                let items = p.list(&[Tok::RParen, Tok::RBrack])?;
                match p.next()? {
                    Tok::RBrack if items.len() == 2 => {
                        let mut it = items.into_iter();
                        Some(Expr::Interval(Box::new(it.next()?), Box::new(it.next()?), true, true))
                    }
                    Tok::RBrack if items.len() == 1 => items.into_iter().next(),
                    Tok::RBrack if !items.is_empty() => Some(Expr::Tuple(items)),
                    Tok::RParen if items.len() == 2 => {
                        let mut it = items.into_iter();
                        Some(Expr::Interval(
                            Box::new(it.next()?),
                            Box::new(it.next()?),
                            true,
                            false,
                        ))
                    }
                    _ => None,
                }
            }),
            Tok::LBrace => self.nested(|p| {
                let items = p.list(&[Tok::RBrace])?;
                if !p.eat(&Tok::RBrace) {
                    return None;
                }
                match items.len() {
                    0 => None,
                    1 => items.into_iter().next(),
                    _ => Some(Expr::List(items)),
                }
            }),
            Tok::SetOpen => self.nested(|p| {
                // Set-builder notation `\{x \mid x > 2\}`, `\{x \in \mathbb{R} : x > 2\}`: the
                // condition describes the set.
                let at = |k: usize| p.toks.get(p.pos + k);
                let separator = |t: Option<&Tok>| matches!(t, Some(Tok::Bar | Tok::Slash));
                if matches!(at(0), Some(Tok::Letter(_))) {
                    let skip = if separator(at(1)) {
                        Some(2)
                    } else if at(1) == Some(&Tok::Rel(Rel::In))
                        && at(2) == Some(&Tok::Reals)
                        && separator(at(3))
                    {
                        Some(4)
                    } else {
                        None
                    };
                    if let Some(skip) = skip {
                        p.pos += skip;
                        let items = p.list_or(&[Tok::SetClose])?;
                        if !p.eat(&Tok::SetClose) {
                            return None;
                        }
                        return joined(items);
                    }
                }
                let items = p.list(&[Tok::SetClose])?;
                if !p.eat(&Tok::SetClose) {
                    return None;
                }
                Some(if items.is_empty() { Expr::EmptySet } else { Expr::Set(items) })
            }),
            Tok::Bar => self.nested(|p| {
                let inner = p.sum()?;
                p.eat(&Tok::Bar).then(|| Expr::Apply(Func::Abs, Box::new(inner)))
            }),
            Tok::Frac => {
                let num = self.arg()?;
                let den = self.arg()?;
                Some(Expr::Div(Box::new(num), Box::new(den)))
            }
            Tok::Binom => {
                let n = self.arg()?;
                let k = self.arg()?;
                Some(Expr::Binom(Box::new(n), Box::new(k)))
            }
            Tok::Sqrt => {
                if self.eat(&Tok::LBrack) {
                    let n = self.nested(|p| p.sum())?;
                    if !self.eat(&Tok::RBrack) {
                        return None;
                    }
                    let x = self.arg()?;
                    return Some(Expr::Root(Box::new(n), Box::new(x)));
                }
                let x = self.arg()?;
                Some(Expr::Apply(Func::Sqrt, Box::new(x)))
            }
            Tok::Func(f) => {
                // \sin^2 x means (\sin x)^2, but \sin^{-1} x is \arcsin x.
                let power =
                    if self.eat(&Tok::Caret) { Some(self.nested(Self::exponent)?) } else { None };
                let inverse =
                    matches!(&power, Some(Expr::Neg(one)) if **one == Expr::Num(Rational::int(1)));
                if inverse && let Some(inv) = inverse_trig(f) {
                    let x = self.func_arg(false)?;
                    return Some(inv(x));
                }
                let trig = matches!(
                    f,
                    Func::Sin | Func::Cos | Func::Tan | Func::Cot | Func::Sec | Func::Csc
                );
                let x = self.func_arg(trig)?;
                let applied = Expr::Apply(f, Box::new(x));
                Some(match power {
                    Some(p) => Expr::Pow(Box::new(applied), Box::new(p)),
                    None => applied,
                })
            }
            Tok::Log => {
                let base = if self.eat(&Tok::Underscore) { Some(self.arg()?) } else { None };
                let power =
                    if self.eat(&Tok::Caret) { Some(self.nested(Self::exponent)?) } else { None };
                let x = self.func_arg(false)?;
                // A bare log is the natural logarithm, as in SymPy and most graders.
                let applied = match base {
                    Some(b) => Expr::Log(Box::new(b), Box::new(x)),
                    None => Expr::Apply(Func::Ln, Box::new(x)),
                };
                Some(match power {
                    Some(p) => Expr::Pow(Box::new(applied), Box::new(p)),
                    None => applied,
                })
            }
            Tok::MatBegin => self.nested(|p| {
                let mut rows = vec![Vec::new()];
                loop {
                    match p.peek()? {
                        Tok::MatEnd => {
                            p.pos += 1;
                            break;
                        }
                        Tok::Amp => p.pos += 1,
                        Tok::RowSep => {
                            p.pos += 1;
                            rows.push(Vec::new());
                        }
                        _ => {
                            let e = p.sum()?;
                            rows.last_mut()?.push(e);
                        }
                    }
                }
                if rows.last().is_some_and(Vec::is_empty) {
                    rows.pop();
                }
                let width = rows.first()?.len();
                (width > 0 && rows.iter().all(|r| r.len() == width)).then_some(Expr::Matrix(rows))
            }),
            _ => None,
        }
    }
}

/// The inverse of a trigonometric function, for `\tan^{-1} x`: `arccot x = arctan(1/x)`, and
/// likewise for the secant and cosecant.
fn inverse_trig(f: Func) -> Option<fn(Expr) -> Expr> {
    fn recip(x: Expr) -> Box<Expr> {
        Box::new(Expr::Div(Box::new(Expr::Num(Rational::int(1))), Box::new(x)))
    }
    Some(match f {
        Func::Sin => |x| Expr::Apply(Func::Asin, Box::new(x)),
        Func::Cos => |x| Expr::Apply(Func::Acos, Box::new(x)),
        Func::Tan => |x| Expr::Apply(Func::Atan, Box::new(x)),
        Func::Cot => |x| Expr::Apply(Func::Atan, recip(x)),
        Func::Sec => |x| Expr::Apply(Func::Acos, recip(x)),
        Func::Csc => |x| Expr::Apply(Func::Asin, recip(x)),
        _ => return None,
    })
}

/// Parses normalised answer text; `None` when it is not math this parser understands, or when
/// the budget or nesting limit is reached.
pub fn parse(text: &str, budget: &mut Budget) -> Option<Expr> {
    let toks = lex(text, budget)?;
    if toks.is_empty() {
        return None;
    }
    let mut p = Parser { toks, pos: 0, depth: 0, budget, degrees: false };
    let items = p.list_or(&[])?;
    if p.pos != p.toks.len() {
        return None;
    }
    joined(items)
}

/// Top-level items as one expression: inequalities joined only by commas or "and" all hold
/// (`x > 0, x \neq 1`); anything else, or anything joined by "or", is a list of alternatives.
fn joined((items, or): (Vec<Expr>, bool)) -> Option<Expr> {
    let inequality =
        |e: &Expr| matches!(e, Expr::Rel(Rel::Lt | Rel::Le | Rel::Gt | Rel::Ge | Rel::Ne, ..));
    match items.len() {
        0 => None,
        1 => items.into_iter().next(),
        _ if !or && items.iter().all(inequality) => Some(Expr::All(items)),
        _ => Some(Expr::List(items)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(text: &str) -> String {
        parse(text, &mut Budget::new(100_000)).map_or_else(|| "none".to_owned(), |e| e.to_string())
    }

    #[test]
    fn shapes() {
        let cases = [
            ("1+2", "(1 + 2)"),
            ("2x", "(2·x)"),
            ("-2^2", "-(2)^(2)"),
            ("2^-1", "(2)^(-1)"),
            ("\\frac12", "(1)/(2)"),
            ("\\frac{1}{2}x", "((1)/(2)·x)"),
            ("2\\frac{1}{2}", "(2 + (1)/(2))"),
            ("2\\frac{1}{2}x", "(2·(1)/(2)·x)"),
            ("\\langle 1, 2 \\rangle", "tuple(1, 2)"),
            ("\\sqrt[3]{8}", "root_3(8)"),
            ("(1,2]", "(1, 2]"),
            ("[0,\\infty)", "[0, ∞)"),
            ("(1,2)", "tuple(1, 2)"),
            ("\\{1,2\\}", "{1, 2}"),
            ("1, 2", "list(1, 2)"),
            ("x=5", "x Eq 5"),
            ("1\\pm\\sqrt{2}", "1 ± Sqrt(2)"),
            ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "matrix[1, 2; 3, 4]"),
            ("|x-1|", "Abs((x + -1))"),
            ("50\\%", "50%"),
            ("5!", "(5)!"),
            ("\\log_2 8", "log_2(8)"),
            ("x_1", "x_1"),
            ("sinx", "Sin(x)"),
            ("\\cos 2x", "Cos((2·x))"),
            ("\\sin x \\cos x", "(Sin(x)·Cos(x))"),
            ("1.5e3", "1500"),
            ("(-\\infty,1)\\cup(2,\\infty)", "tuple(-∞, 1) ∪ tuple(2, ∞)"),
            ("\\frac{1}{", "none"),
            ("\\unknowncommand", "none"),
            ("(1", "none"),
        ];
        for (text, want) in cases {
            assert_eq!(show(text), want, "{text}");
        }
    }

    #[test]
    fn depth_and_budget_are_bounded() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        assert_eq!(show(&deep), "none");
        let long = "1+".repeat(100_000) + "1";
        assert!(parse(&long, &mut Budget::new(10_000)).is_none());
    }
}
