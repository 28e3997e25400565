"""``transformer serve``: an HTTP translation API and a web page, on FastAPI + uvicorn.

* :mod:`transformer.serve.limits`: :class:`ServeLimits`, every bound the server enforces.
* :mod:`transformer.serve.batching`: :class:`DynamicBatcher`, which merges requests arriving within
  a few milliseconds into one ``Translator`` call run on a worker thread (bounded queue, timeouts).
* :mod:`transformer.serve.service`: :class:`TranslationService`, one model's operations (texts and
  pages translated in their structure, the attention of a sentence, health) over its batcher, with
  no HTTP in it.
* :mod:`transformer.serve.documents`: texts cut into sentences and model inputs, and put back together.
* :mod:`transformer.serve.schemas`: the pydantic request and response models (the OpenAPI schema).
* :mod:`transformer.serve.api`: :class:`~transformer.serve.api.Api`, one API of the server: a
  router whose routes answer errors in its shape, and whether it has CORS.
* :mod:`transformer.serve.routes`: the routers of the native API and the page, over a service;
  :mod:`transformer.serve.libretranslate`: the LibreTranslate API's (a sub-package: its routes,
  its parameters read and checked, :mod:`~transformer.serve.libretranslate.params`; its uploads and
  files, :mod:`~transformer.serve.libretranslate.files`), with its API keys and limits
  (:mod:`transformer.serve.access`), suggestions (:mod:`transformer.serve.libretranslate.suggestions`) and
  self-description (:mod:`transformer.serve.libretranslate.spec`: ``/spec``, ``/frontend/settings``).
* :mod:`transformer.serve.app`: :func:`create_app`, the FastAPI application: a service, its routers,
  the middleware (:mod:`transformer.serve.middleware`) and the handlers of what no route answers.
* :mod:`transformer.serve.page`: the web page at ``/`` (reuses the attention page of
  :mod:`transformer.visualize`).
* :mod:`transformer.serve.protocol`: the connections uvicorn serves (deadlines for slow clients, a cap,
  the graceful shutdown).
* :mod:`transformer.serve.reload`: a newer run swapped in without a restart (SIGHUP, ``POST
  /admin/reload``), and the model versions answers name.
* :mod:`transformer.serve.cli`: the ``serve`` subcommand.

FastAPI and uvicorn come with the ``serve`` extra: ``pip install -c constraints.txt -e ".[serve]"``.
"""

from transformer.serve.limits import ServeLimits

__all__ = ["ServeLimits", "create_app"]


def create_app(*args, **kwargs):
    """:func:`transformer.serve.app.create_app` (imported on use, so ``ServeLimits`` needs no FastAPI)."""
    from transformer.serve.app import create_app as _create_app

    return _create_app(*args, **kwargs)
