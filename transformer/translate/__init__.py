"""Token ids -> text: the ``Translator`` (text in, text out), the ``translate`` and ``evaluate``
commands, and sacreBLEU scoring."""
