#!/usr/bin/env python3
"""Writes tests/tokenizer/strings.jsonl, the test strings of the tokenizer comparison (issue 25;
docs/tokenizer.md "Checked against"). Every text here was written for this project. One JSON
object a line: {"name": ..., "text": ...}. Run from anywhere; the output goes beside this file.
Invalid UTF-8 cannot be written in JSON: those byte strings are in invalid_utf8.hex."""
import json
import os
import unicodedata

S = []


def add(name, text):
    S.append({"name": name, "text": text})


# --- edge cases of length and whitespace ---------------------------------------------------
add("empty", "")
add("one-space", " ")
add("two-spaces", "  ")
add("one-letter", "a")
add("one-digit", "7")
add("newline", "\n")
add("crlf", "\r\n")
add("tab", "\t")
add("nbsp", "\u00a0")
add("leading-space", " leading space")
add("leading-spaces", "   three leading spaces")
add("trailing-space", "trailing space ")
add("trailing-spaces", "trailing spaces    ")
add("both-ends", "  both ends  ")
add("space-runs", "one two  three   four    five     six      seven")
add("tab-runs", "a\tb\t\tc\t\t\td")
add("newline-runs", "line one\nline two\n\nline four\n\n\n\nline eight")
add("crlf-lines", "first line\r\nsecond line\r\n\r\nfourth line\r\n")
add("cr-only", "old mac\rline endings\r")
add("mixed-ws", " \t \n \r\n\t\t  \n  x  \n\t")
add("nbsp-words", "price:\u00a0100\u00a0EUR, 10\u00a0000 people")
add("other-spaces", "em\u2003space, thin\u2009space, ideographic\u3000space, narrow\u202fnbsp")
add("zero-width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom")
add("only-newlines", "\n\n\n\n\n")
add("only-spaces", " " * 17)
add("space-before-newline", "word   \n   word")
add("indent", "    four\n        eight\n\tone tab\n")

# --- English, contractions, punctuation ---------------------------------------------------
add("sentence", "The quick brown fox jumps over the lazy dog.")
add("contractions", "It's what they're saying: we've done it, I'm sure, you'll see, he'd agree, don't.")
add("contractions-upper", "IT'S THEY'RE WE'VE I'M YOU'LL HE'D DON'T")
add("contractions-mixed", "It'S tHeY'rE wE'Ve")
add("apostrophe-curly", "It\u2019s a \u2018quoted\u2019 \u201cword\u201d")
add("possessives", "the cat's toy, the cats' toys, James's book")
add("punct-runs", "Wait... what?!? Really!!! (yes) [no] {maybe} <tag> --- ___ *** ###")
add("punct-leading-space", "a , b . c ; d : e ! f ? g")
add("quotes", "\"double\" 'single' `back` \u00abguillemets\u00bb \u201elow\u201c")
add("hyphens", "well-known state-of-the-art e-mail co-operate \u2013 en \u2014 em")
add("urls", "See https://example.org/path/to?q=1&r=two#frag or mailto:someone@example.com.")
add("emails", "first.last+tag@sub.domain.example, x@y.z")
add("title-case", "A Tale Of Two Cities And Other Stories")
add("all-caps", "THIS IS SHOUTING IN ALL CAPS, ISN'T IT?")
add("camel", "camelCaseIdentifier PascalCaseName snake_case_name SCREAMING_SNAKE kebab-case-name")
add("abbrev", "e.g. i.e. etc. Mr. Dr. U.S.A. a.m. p.m.")

# --- digits -------------------------------------------------------------------------------
add("digits-1", "1")
add("digits-3", "123")
add("digits-4", "1234")
add("digits-7", "1234567")
add("digits-long", "3141592653589793238462643383279502884197169399375105820974944592")
add("digits-grouped", "1,234,567.89 and 1.234.567,89 and 1 234 567")
add("digits-mixed", "abc123def4567ghi89 x1y22z333")
add("digits-phone", "+1 (555) 010-9999, +49 30 1234567")
add("digits-dates", "2024-02-29T23:59:59Z 31/12/1999 12.03.2001")
add("digits-float", "0.5 -0.25 1e-9 6.022e23 3.14159 .5 5.")
add("digits-hex", "0xDEADBEEF 0b1010 0o755 #ff8800")
add("digits-arabic-indic", "\u0661\u0662\u0663\u0664\u0665 \u06f1\u06f2\u06f3")
add("digits-devanagari", "\u0967\u0968\u0969\u096a")
add("digits-fullwidth", "\uff11\uff12\uff13\uff14\uff15")
add("digits-superscript", "x\u00b2 + y\u00b3 = z\u2074, \u00bd \u00bc \u2155")
add("roman", "\u2160 \u2161 \u2162 \u216b")

# --- Latin with diacritics --------------------------------------------------------------------
add("french", "L'\u00e9l\u00e8ve a re\u00e7u un cadeau tr\u00e8s \u00e9l\u00e9gant \u00e0 No\u00ebl; o\u00f9 est le ch\u00e2teau?")
add("german", "Gr\u00fc\u00dfe aus M\u00fcnchen! Die Stra\u00dfe ist sch\u00f6n, \u00c4rger \u00fcber \u00d6l. STRASSE \u1e9e")
add("spanish", "\u00bfD\u00f3nde est\u00e1 la estaci\u00f3n? \u00a1Ma\u00f1ana ser\u00e1 otro d\u00eda, se\u00f1or!")
add("portuguese", "A\u00e7\u00e3o, cora\u00e7\u00e3o, p\u00e3o e informa\u00e7\u00f5es s\u00e3o palavras comuns.")
add("polish", "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144. \u0141\u00f3d\u017a i Gda\u0144sk.")
add("czech", "P\u0159\u00edli\u0161 \u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u00fap\u011bl \u010f\u00e1belsk\u00e9 \u00f3dy.")
add("vietnamese", "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u: \u0111\u01b0\u1eddng ph\u1ed1 H\u00e0 N\u1ed9i r\u1ea5t \u0111\u1eb9p.")
add("turkish", "\u0130stanbul'da \u0131\u015f\u0131k, \u00e7i\u00e7ek ve \u011fa\u011f\u0131lar. I\u0131 \u0130i")
add("icelandic", "\u00de\u00f3r\u00f0ur og \u00c6gir \u00feurftu a\u00f0 \u00fe\u00fdtt \u00e1 \u00f6ld.")
add("romanian", "\u0218coala \u0219i \u021b\u0103ranul \u00een \u021bar\u0103 (\u015f \u0163 cedilla forms)")
add("nordic", "K\u00f8benhavn, \u00c5rhus, bl\u00e5b\u00e6rsyltet\u00f8j, sm\u00f6rg\u00e5s")
add("latin-ext", "\u0100\u0101 \u0112\u0113 \u012a\u012b \u014c\u014d \u016a\u016b \u01c4 \u01c5 \u01c6 \u0131 \u0237 \u0149")
add("ligatures", "\ufb01nd the \ufb02ow, \ufb00 \ufb03 \ufb04 \u0153uvre \u00e6sthetic")

# --- other scripts -----------------------------------------------------------------------------
add("russian", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u042d\u0442\u043e \u0442\u0435\u0441\u0442\u043e\u0432\u0430\u044f \u0441\u0442\u0440\u043e\u043a\u0430 \u043d\u0430 \u0440\u0443\u0441\u0441\u043a\u043e\u043c \u044f\u0437\u044b\u043a\u0435.")
add("ukrainian", "\u0407\u0436\u0430\u043a \u0456 \u0491\u0443\u0434\u0437\u0438\u043a \u0454 \u0432 \u0441\u0430\u0434\u043a\u0443, \u0449\u0435 \u0439 \u0457\u0445\u043d\u0456 \u0434\u0440\u0443\u0437\u0456.")
add("greek", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5! \u0397 \u03b3\u03bb\u03ce\u03c3\u03c3\u03b1 \u03bc\u03bf\u03c5 \u03b5\u03af\u03bd\u03b1\u03b9 \u03b5\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ae; \u03b1\u03b2\u03b3 \u0391\u0392\u0393")
add("greek-polytonic", "\u1f10\u03bd \u1f00\u03c1\u03c7\u1fc7 \u1f26\u03bd \u1f41 \u03bb\u03cc\u03b3\u03bf\u03c2")
add("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0647\u0630\u0627 \u0646\u0635 \u0639\u0631\u0628\u064a \u0644\u0644\u0627\u062e\u062a\u0628\u0627\u0631.")
add("arabic-harakat", "\u0627\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629\u064f")
add("persian", "\u0633\u0644\u0627\u0645 \u062f\u0646\u06cc\u0627\u060c \u0627\u06cc\u0646 \u06cc\u06a9 \u0622\u0632\u0645\u0627\u06cc\u0634 \u0627\u0633\u062a\u061f")
add("hebrew", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u05d6\u05d4\u05d5 \u05de\u05e9\u05e4\u05d8 \u05d1\u05e2\u05d1\u05e8\u05d9\u05ea.")
add("hebrew-niqqud", "\u05d1\u05bc\u05b0\u05e8\u05b5\u05d0\u05e9\u05c1\u05b4\u05d9\u05ea")
add("bidi-mixed", "The word \u05e9\u05dc\u05d5\u05dd means peace and \u0633\u0644\u0627\u0645 too (123).")
add("hindi", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u092f\u0939 \u090f\u0915 \u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0935\u093e\u0915\u094d\u092f \u0939\u0948\u0964")
add("bengali", "\u0986\u09ae\u09bf \u09ac\u09be\u0982\u09b2\u09be\u09af\u09bc \u0995\u09a5\u09be \u09ac\u09b2\u09bf\u0964")
add("tamil", "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd")
add("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e19\u0e35\u0e48\u0e04\u0e37\u0e2d\u0e01\u0e32\u0e23\u0e17\u0e14\u0e2a\u0e2d\u0e1a\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22")
add("lao-khmer", "\u0eaa\u0eb0\u0e9a\u0eb2\u0e8d\u0e94\u0eb5 \u179f\u17bd\u179f\u17d2\u178f\u17b8")
add("georgian-armenian", "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u0532\u0561\u0580\u0587 \u0571\u0565\u0566")
add("ethiopic", "\u1230\u120b\u121d \u12a0\u1208\u121d")
add("chinese-simplified", "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u7528\u4e8e\u6d4b\u8bd5\u5206\u8bcd\u5668\u7684\u53e5\u5b50\u3002")
add("chinese-traditional", "\u7e41\u9ad4\u4e2d\u6587\u7684\u6e2c\u8a66\u53e5\u5b50\uff1a\u81fa\u7063\u3001\u9999\u6e2f\u3002")
add("japanese", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u3092\u6df7\u305c\u305f\u6587\u3067\u3059\u3002\uff76\uff80\uff76\uff85")
add("korean", "\uc548\ub155\ud558\uc138\uc694, \uc138\uacc4! \ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc744 \uc2dc\ud5d8\ud569\ub2c8\ub2e4.")
add("korean-jamo", "\u1100\u1161\u11a8 \u3131\u314f")
add("cjk-ext", "\U00020000\U0002a6d6 \u3400\u4dbf \uf900")
add("cjk-punct", "\u300c\u5f15\u7528\u300d\u300e\u4e8c\u91cd\u300f\u3010\u62ec\u5f27\u3011\uff08\u5168\u89d2\uff09\u30fb\u2026")
add("mixed-scripts", "English, \u0420\u0443\u0441\u0441\u043a\u0438\u0439, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, \u4e2d\u6587, \u65e5\u672c\u8a9e, \ud55c\uad6d\uc5b4, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, \u05e2\u05d1\u05e8\u05d9\u05ea, \u0939\u093f\u0928\u094d\u0926\u0940, \u0e44\u0e17\u0e22")

# --- symbols, emoji -----------------------------------------------------------------------------
add("math", "\u2200x\u2208\u211d: x\u00b2 \u2265 0, \u2211\u1d62 a\u1d62 \u2260 \u222b f(x) dx \u2248 \u03c0 \u00b1 \u221e")
add("currency", "$5 \u20ac10 \u00a320 \u00a5300 \u20b9400 \u20bf0.01 \u20a9")
add("arrows-box", "\u2190 \u2191 \u2192 \u2193 \u21d2 \u2500\u2502\u250c\u2510\u2514\u2518 \u2588\u2591")
add("emoji-basic", "I love it \U0001f600\U0001f602\U0001f60d \U0001f44d")
add("emoji-skin", "\U0001f44b\U0001f3fb \U0001f44b\U0001f3fc \U0001f44b\U0001f3fd \U0001f44b\U0001f3fe \U0001f44b\U0001f3ff")
add("emoji-zwj-family", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family")
add("emoji-zwj-prof", "\U0001f469\U0001f3fd\u200d\U0001f4bb \U0001f9d1\u200d\U0001f680 \U0001f3f3\ufe0f\u200d\U0001f308")
add("emoji-flags", "\U0001f1eb\U0001f1f7 \U0001f1ef\U0001f1f5 \U0001f1fa\U0001f1f8 \U0001f1e7\U0001f1f7 \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f")
add("emoji-keycap", "1\ufe0f\u20e3 #\ufe0f\u20e3 \u2764\ufe0f \u2764 \u263a\ufe0f")
add("emoji-run", "\U0001f525" * 9 + "\U0001f389\U0001f38a\U0001f388")
add("emoji-text", "Great job!\U0001f389Let's go\U0001f680\U0001f680 now.")
add("symbols-misc", "\u00a9 \u00ae \u2122 \u00a7 \u00b6 \u2020 \u2021 \u2022 \u00b0 \u2030 \u2116")
add("control-chars", "a\u0001b\u0007c\u001bd\u007fe")
add("nul-char", "before\u0000after")
add("private-use", "\ue000\uf8ff")
add("replacement-char", "bad \ufffd char")
add("combining-alone", "\u0301\u0308 start with combining")
add("zalgo", "z\u0351\u0357a\u0300\u0301l\u0308\u0303g\u034fo\u0489")
add("astral", "\U0001d400\U0001d401 \U0001d538 \U00010348 \U0001f9ea")

# --- NFC vs NFD -----------------------------------------------------------------------------------
for nm, t in [("french", "\u00c9cole \u00e9t\u00e9 caf\u00e9 na\u00efve co\u00f6perate"),
              ("vietnamese", "Vi\u1ec7t Nam \u0111\u1eb9p l\u1eafm"),
              ("korean", "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8"),
              ("german", "\u00c4pfel \u00d6fen \u00dcbel"),
              ("greek", "\u03ac\u03ad\u03ae\u03af\u03cc\u03cd\u03ce \u0390")]:
    add("nfc-" + nm, unicodedata.normalize("NFC", t))
    add("nfd-" + nm, unicodedata.normalize("NFD", t))
add("nfkc-candidates", "\u2460 \u2168 \uff21\uff22\uff23 \u33a1 \u2126 \u212b \u00b5 \u017f")

# --- special and added token text -----------------------------------------------------------------
for nm, t in [("endoftext", "<|endoftext|>"), ("s", "<s>"), ("s-close", "</s>"), ("unk", "<unk>"),
              ("im-start", "<|im_start|>"), ("im-end", "<|im_end|>"), ("bos", "<bos>"), ("eos", "<eos>"),
              ("pad", "<pad>"), ("begin-of-text", "<|begin_of_text|>"), ("eot-id", "<|eot_id|>"),
              ("start-header", "<|start_header_id|>"), ("start-of-turn", "<start_of_turn>"),
              ("end-of-turn", "<end_of_turn>"), ("think", "<think>"), ("mask", "<mask>")]:
    add("special-" + nm, t)
    add("special-" + nm + "-in-text", "before " + t + " after")
    add("special-" + nm + "-glued", "x" + t + "y")
add("special-chat-qwen", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n")
add("special-chat-llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
add("special-chat-gemma", "<bos><start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n")
add("special-chat-llama2", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST] Hi!</s>")
add("special-repeated", "<s><s></s></s><|endoftext|><|endoftext|>")
add("special-broken", "<|endoftext| <|endof text|> < s> <s > <|im_start> |im_end|>")
add("special-spaces", "  <|endoftext|>  <s>  <bos>  ")
add("special-newlines", "\n<|im_start|>\n\n<|im_end|>\n")
add("special-only-start", "<s>hello")
add("special-only-end", "hello</s>")

# --- code -------------------------------------------------------------------------------------------
add("code-c", "#include <stdio.h>\n\nint main(void)\n{\n    for (int i = 0; i < 10; ++i)\n        printf(\"%d\\n\", i * i);\n    return 0;\n}\n")
add("code-python", "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nif __name__ == '__main__':\n    print([fib(k) for k in range(20)])\n")
add("code-js", "const xs = [1, 2, 3].map((x) => x ** 2).filter(x => x !== 4);\nconsole.log(`squares: ${xs.join(', ')}`);\n")
add("code-rust", "fn main() {\n    let v: Vec<u32> = (0..8).collect();\n    println!(\"{:?}\", v.iter().sum::<u32>());\n}\n")
add("code-html", "<!DOCTYPE html>\n<html lang=\"en\">\n  <body>\n    <p class=\"note\">Hello &amp; welcome&nbsp;here</p>\n  </body>\n</html>\n")
add("code-json", "{\"name\": \"sequoia\", \"ids\": [1, 22, 333], \"nested\": {\"ok\": true, \"v\": null}}")
add("code-sql", "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;")
add("code-shell", "for f in *.txt; do\n  grep -c 'foo' \"$f\" || echo \"none in $f\" >&2\ndone | sort -n | tail -3\n")
add("code-tabs", "\tif (x) {\n\t\treturn y;\n\t}\n")
add("code-long-line", "x = " + " + ".join("v%d" % i for i in range(60)))
add("code-regex", "re.compile(r'^(?P<key>[A-Za-z_]\\w*)\\s*=\\s*(?P<val>\"[^\"]*\"|\\d+)$')")
add("code-latex", "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}")
add("code-diff", "--- a/file.c\n+++ b/file.c\n@@ -1,3 +1,4 @@\n int x;\n-int y;\n+int y = 0;\n+int z;\n")
add("markdown", "# Title\n\n## Section\n\n- item one\n- item **two**\n  - nested _three_\n\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")

# --- repetition, long words -----------------------------------------------------------------------
add("repeat-char", "a" * 200)
add("repeat-word", "hello " * 50)
add("repeat-newline-word", "ab\n" * 40)
add("long-word", "Pneumonoultramicroscopicsilicovolcanoconiosis Donaudampfschifffahrtsgesellschaftskapit\u00e4n")
add("long-cjk-run", "\u6f22\u5b57" * 60)
add("repeat-punct", "!?" * 50 + "." * 64)
add("repeat-spaces-long", "x" + " " * 100 + "y")
add("base64", "U2VxdW9pYSB0b2tlbml6ZXIgdGVzdCBzdHJpbmcgZm9yIGJhc2U2NA==")
add("hash", "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")

# --- documents (a few KB each) ----------------------------------------------------------------------
EN = ("Sequoia trees grow slowly and live for thousands of years. A grove on a quiet morning is "
      "full of small sounds: water dripping from needles, a jay calling, the creak of a trunk "
      "that has stood since before any written history of the place. Visitors often say they "
      "feel small there, and they're right; the tallest of these trees is taller than a "
      "thirty-storey building, and its roots spread wider than a football field.\n\n"
      "Fire is part of their life. The bark, up to 60 cm thick, protects the living wood, and "
      "the heat opens the cones so that seeds fall on freshly cleared ground. In 1890 the first "
      "protected area was created; by 2020, after several large fires, about 13-19% of the large "
      "trees had been lost.\n\n")
DE = ("Der Mammutbaum w\u00e4chst langsam, aber er wird sehr alt. Im Fr\u00fchling riecht der Wald nach Harz "
      "und feuchter Erde; \u00fcberall liegen Zapfen, gro\u00df wie H\u00fchnereier. Wer hier spazieren geht, "
      "h\u00f6rt kaum etwas au\u00dfer dem Wind.\n\n")
RU = ("\u0421\u0435\u043a\u0432\u043e\u0439\u044f \u2014 \u043e\u0434\u043d\u043e \u0438\u0437 \u0441\u0430\u043c\u044b\u0445 \u0432\u044b\u0441\u043e\u043a\u0438\u0445 \u0434\u0435\u0440\u0435\u0432\u044c\u0435\u0432 \u043d\u0430 \u0417\u0435\u043c\u043b\u0435. \u0415\u0451 \u043a\u043e\u0440\u0430 \u0442\u043e\u043b\u0441\u0442\u0430\u044f \u0438 \u043c\u044f\u0433\u043a\u0430\u044f, "
      "\u0430 \u0434\u0440\u0435\u0432\u0435\u0441\u0438\u043d\u0430 \u043f\u043e\u0447\u0442\u0438 \u043d\u0435 \u0433\u043d\u0438\u0451\u0442. \u0412 2023 \u0433\u043e\u0434\u0443 \u0443\u0447\u0451\u043d\u044b\u0435 \u043d\u0430\u0441\u0447\u0438\u0442\u0430\u043b\u0438 \u0431\u043e\u043b\u0435\u0435 15 000 \u0434\u0435\u0440\u0435\u0432\u044c\u0435\u0432.\n\n")
ZH = ("\u7ea2\u6749\u751f\u957f\u7f13\u6162\uff0c\u5bff\u547d\u53ef\u8fbe\u6570\u5343\u5e74\u3002\u6e05\u6668\u7684\u6811\u6797\u91cc\u5f88\u5b89\u9759\uff0c\u53ea\u80fd\u542c\u5230\u6c34\u6ef4\u548c\u9e1f\u9e23\u3002"
      "\u6811\u76ae\u5f88\u539a\uff0c\u53ef\u4ee5\u62b5\u6321\u5c71\u706b\uff1b\u706b\u540e\uff0c\u677e\u679c\u88c2\u5f00\uff0c\u79cd\u5b50\u843d\u5728\u7a7a\u5730\u4e0a\u3002\n\n")
JA = ("\u30bb\u30b3\u30a4\u30a2\u306f\u3068\u3066\u3082\u5927\u304d\u306a\u6728\u3067\u3059\u3002\u68ee\u3092\u6b69\u304f\u3068\u3001\u6728\u3005\u306e\u9593\u304b\u3089\u5149\u304c\u5dee\u3057\u8fbc\u307f\u307e\u3059\u3002\n\n")
AR = ("\u0623\u0634\u062c\u0627\u0631 \u0627\u0644\u0633\u0643\u0648\u064a\u0627 \u0645\u0646 \u0623\u0637\u0648\u0644 \u0627\u0644\u0623\u0634\u062c\u0627\u0631 \u0641\u064a \u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0648\u062a\u0639\u064a\u0634 \u0622\u0644\u0627\u0641 \u0627\u0644\u0633\u0646\u064a\u0646.\n\n")
HI = ("\u0938\u0947\u0915\u094b\u092f\u093e \u0915\u0947 \u092a\u0947\u0921\u093c \u092c\u0939\u0941\u0924 \u090a\u0901\u091a\u0947 \u0914\u0930 \u092a\u0941\u0930\u093e\u0928\u0947 \u0939\u094b\u0924\u0947 \u0939\u0948\u0902\u0964 \u0935\u0947 \u0939\u091c\u093c\u093e\u0930\u094b\u0902 \u0938\u093e\u0932 \u091c\u0940\u0924\u0947 \u0939\u0948\u0902\u0964\n\n")
KO = ("\uc138\ucffc\uc774\uc544\ub294 \uc544\uc8fc \ud06c\uace0 \uc624\ub798 \uc0ac\ub294 \ub098\ubb34\uc785\ub2c8\ub2e4. \uc232\uc740 \uc870\uc6a9\ud558\uace0 \uc2dc\uc6d0\ud569\ub2c8\ub2e4.\n\n")
TH = ("\u0e15\u0e49\u0e19\u0e40\u0e0b\u0e04\u0e27\u0e2d\u0e22\u0e32\u0e40\u0e1b\u0e47\u0e19\u0e15\u0e49\u0e19\u0e44\u0e21\u0e49\u0e17\u0e35\u0e48\u0e2a\u0e39\u0e07\u0e21\u0e32\u0e01\u0e41\u0e25\u0e30\u0e21\u0e35\u0e2d\u0e32\u0e22\u0e38\u0e22\u0e37\u0e19\u0e22\u0e32\u0e27\n\n")
CODE = ("def grow(tree, levels):\n    for depth in range(levels):\n        for node in tree.frontier():\n"
        "            node.expand(k=4)  # four children per node\n    return tree\n\n")
add("doc-english", EN * 4)
add("doc-multilingual", EN + DE + RU + ZH + JA + AR + HI + KO + TH + CODE + EN)
add("doc-mixed-long", (EN + CODE + DE + "\U0001f332\U0001f333 " * 5 + "\n\n" + RU + ZH + "12345678901234567890\n\n") * 3)
add("doc-crlf", (EN + DE).replace("\n", "\r\n") * 2)
add("doc-code", (CODE + "int main() {\n\treturn 0;\n}\n\n") * 12)
add("doc-cjk", (ZH + JA + KO) * 6)

here = os.path.dirname(os.path.abspath(__file__))
names = set()
with open(os.path.join(here, "strings.jsonl"), "w", encoding="utf-8", newline="\n") as f:
    for s in S:
        assert s["name"] not in names, s["name"]
        names.add(s["name"])
        f.write(json.dumps(s, ensure_ascii=False) + "\n")
print(len(S), "strings,", sum(len(s["text"].encode()) for s in S), "bytes")
