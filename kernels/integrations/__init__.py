"""Model-library integrations: tilejit's ops inside other libraries' models.

- `kernels.integrations.transformers`: Hugging Face transformers (the optional extra `hf`); the
  only module that imports transformers.

`kernels.integrations._ops` holds the small ops they need that the library does not have yet
(rotary embedding, act-and-mul).
"""
