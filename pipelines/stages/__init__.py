"""The stages of a run, each usable alone against a model directory.

prepare -> train -> average -> evaluate -> export, plus translate and score. Each takes the
run's `Recipe` and asks the task for what differs between tasks; none tests its kind of task.
The command line runs them through one interface, `modes.Stage.run(recipe, context)`.

  modes      the stages (`STAGES`), which run under a backend, which write, the dir's lock
  prepare    prepare, and the settings.json record
  evaluate   evaluate, and training's dev metric
  export     export, and the translator it serves
  translate  translate and score
  made_from  what average, evaluate and export made, and from what (redone when it changed)
"""
