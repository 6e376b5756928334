import tensorflow as tf
def test_peek(translator, shared_data):
    lines = (shared_data / "multi30k" / "val.en").read_text().splitlines()[:6]
    out = translator.translate(tf.constant(lines + ["", "🙂🚀 👍🏽", "你好", " ".join(["word"] * 1000)]))
    for l, t, s in zip(lines + ["<empty>", "emoji", "cjk", "long"], out["translation"].numpy(), out["score"].numpy()):
        print(repr(l[:60]), "->", t.decode("utf-8", "replace")[:120], round(float(s), 3))
