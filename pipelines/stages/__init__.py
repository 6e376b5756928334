"""The stages of a run, each usable alone against a model directory.

prepare -> train -> average -> evaluate -> export, plus translate and score. Every stage
takes the `Recipe` that `pipelines.settings.resolver.resolve` made from the flags and the
model directory, and asks the task for whatever differs between tasks (metric, constraint,
in-graph pre- and post-processing); none tests what kind of task it has.

  modes      which stages a run may run, the ones that write, and the model dir's lock
  prepare    prepare, and the settings record of what a run decided
  train      train
  average    average
  evaluate   evaluate, and the dev metric that training reports
  export     export (TensorFlow's serving graph), and the translator it serves
  translate  translate and score (TensorFlow's search)

prepare, train, average and evaluate run under every Keras backend
(`modes.ANY_BACKEND_STAGES`). What average, evaluate and export made, and from what, is
`pipelines.model_dir.made_from`'s.
"""
