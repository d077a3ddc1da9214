//! A realistic, generated compression corpus: the demo page (HTML) plus JSON, JavaScript and
//! CSS of the shapes a site's entrance serves. Deterministic, so ratios are comparable run
//! to run; generated, so nothing large is shipped in the repository.

use bytes::Bytes;

/// A small deterministic generator (PCG-style LCG).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next() as usize % from.len()]
    }
}

const WORDS: &[&str] = &[
    "gateway",
    "offload",
    "handshake",
    "certificate",
    "upstream",
    "latency",
    "checkout",
    "product",
    "account",
    "session",
    "payment",
    "shipping",
    "review",
    "search",
    "cart",
    "recommendation",
    "inventory",
    "discount",
    "category",
    "delivery",
];

fn json(len: usize) -> Vec<u8> {
    let mut g = Gen(1);
    let mut s = String::from("{\"items\":[");
    while s.len() < len {
        s.push_str(&format!(
            "{{\"id\":{},\"sku\":\"SKU-{:08X}\",\"name\":\"{} {}\",\"price\":{}.{:02},\"stock\":{},\"tags\":[\"{}\",\"{}\"],\"rating\":{:.1},\"available\":{}}},",
            g.next() % 1_000_000,
            g.next(),
            g.pick(WORDS),
            g.pick(WORDS),
            g.next() % 1000,
            g.next() % 100,
            g.next() % 500,
            g.pick(WORDS),
            g.pick(WORDS),
            (g.next() % 50) as f64 / 10.0,
            g.next().is_multiple_of(2)
        ));
    }
    s.pop();
    s.push_str("]}");
    s.into_bytes()
}

fn javascript(len: usize) -> Vec<u8> {
    let mut g = Gen(2);
    let mut s = String::from("\"use strict\";\n");
    while s.len() < len {
        let (a, b) = (g.pick(WORDS), g.pick(WORDS));
        s.push_str(&format!(
            "function {a}_{b}_{n}(e,t){{var n=e.{a}||[];for(let r=0;r<n.length;r++){{if(n[r].{b}===t)return n[r]}}return document.querySelector(\".{a}-{b}\")?.dataset[\"{b}\"]??null}}\nexport const {b}{n}=({{id:o,value:i}})=>fetch(`/api/{a}/${{o}}`,{{method:\"POST\",body:JSON.stringify({{{b}:i}})}}).then(r=>r.json());\n",
            n = g.next() % 10_000
        ));
    }
    s.into_bytes()
}

fn css(len: usize) -> Vec<u8> {
    let mut g = Gen(3);
    let mut s = String::new();
    while s.len() < len {
        s.push_str(&format!(
            ".{}-{} .{}>a:hover{{color:#{:06x};margin:{}px {}px;padding:0 {}rem;display:flex;justify-content:space-between;border-radius:{}px}}\n@media (max-width:{}px){{.{}{{font-size:{}px;line-height:1.{}}}}}\n",
            g.pick(WORDS),
            g.pick(WORDS),
            g.pick(WORDS),
            g.next() & 0xffffff,
            g.next() % 32,
            g.next() % 32,
            g.next() % 4,
            g.next() % 12,
            320 + g.next() % 1200,
            g.pick(WORDS),
            10 + g.next() % 14,
            g.next() % 9
        ));
    }
    s.into_bytes()
}

/// The corpus: (name, content type, bytes).
pub(crate) fn corpus() -> Vec<(&'static str, &'static str, Bytes)> {
    vec![
        ("page.html", "text/html", crate::demo::page().clone()),
        ("items.json", "application/json", json(120 * 1024).into()),
        (
            "app.js",
            "application/javascript",
            javascript(160 * 1024).into(),
        ),
        ("site.css", "text/css", css(60 * 1024).into()),
    ]
}
