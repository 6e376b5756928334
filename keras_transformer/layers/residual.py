"""The residual connection around every sub-layer (Section 3.1, Section 5.4)."""


def residual(x, sublayer, norm, dropout, pre_norm, training):
    """Post-norm LayerNorm(x + Dropout(sublayer(x))) (the paper) or pre-norm
    x + Dropout(sublayer(LayerNorm(x))) (more stable for deep stacks and large learning rates)."""
    if pre_norm:
        return x + dropout(sublayer(norm(x)), training=training)
    return norm(x + dropout(sublayer(x), training=training))
