"""OpenTelemetry traces of a run: spans around sampling, learner iterations and checkpoints, with the right
parents, kept in memory (the SDK's exporter) or exported over OTLP/HTTP to a collector on 127.0.0.1."""

import copy
import importlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from easydict import EasyDict

from ding.config import ConfigError
from ding.service import check_service_config
from ding.service.hooks import ServiceRuntime
from ding.worker.learner import BaseLearner
from tests.helpers.service import learner_cfg, make_batch, make_dqn_policy

otel_sdk = pytest.importorskip('opentelemetry.sdk', reason="the otel extra: pip install 'ding[otel]'")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


def test_spans_of_sampling_iterations_and_checkpoints_have_the_run_as_parent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exporter = InMemorySpanExporter()
    policy = make_dqn_policy()
    learner = BaseLearner(learner_cfg(save_ckpt_after_iter=2), policy.learn_mode, exp_name='traced')
    runtime = ServiceRuntime(
        {'tracing': {'enable': True, 'service_name': 'test-learner'}}, 'traced', span_exporter=exporter
    )
    try:
        runtime.attach_learner(learner)
        learner.call_hook('before_run')
        runtime.observe_sample(None, 0.001, 0)  # not enough data yet
        for it in range(4):
            batch = make_batch(it)
            runtime.observe_sample(batch, 0.002, learner.train_iter)
            learner.train(batch)
        learner.call_hook('after_run')
    finally:
        runtime.close()
        learner.close()

    spans = exporter.get_finished_spans()
    by_name = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == ['learner.checkpoint', 'learner.run', 'learner.sample', 'learner.train_iter']
    (run,) = by_name['learner.run']
    iterations, samples, checkpoints = (
        by_name['learner.train_iter'],
        by_name['learner.sample'],
        by_name['learner.checkpoint'],
    )
    assert run.parent is None and run.attributes['ding.iterations'] == 4
    assert run.resource.attributes['service.name'] == 'test-learner'
    assert run.resource.attributes['ding.run_id'] == runtime.run_id
    assert [s.attributes['ding.iteration'] for s in iterations] == [0, 1, 2, 3]
    assert [s.attributes['ding.sample.status'] for s in samples] == ['empty', 'ok', 'ok', 'ok', 'ok']
    assert all(s.context.trace_id == run.context.trace_id for s in spans)
    assert all(s.parent.span_id == run.context.span_id for s in iterations + samples)
    # Checkpoints every 2 iterations: written inside iterations 2 and 4, each span inside its iteration's.
    assert len(checkpoints) == 2
    for checkpoint in checkpoints:
        (parent,) = [s for s in iterations if s.context.span_id == checkpoint.parent.span_id]
        assert parent.attributes['ding.iteration'] in (1, 3)
        assert parent.start_time <= checkpoint.start_time and checkpoint.end_time <= parent.end_time


class OtlpCollector:
    """A stand-in OTLP/HTTP collector on 127.0.0.1: records each POST's path, content type and body."""

    def __init__(self) -> None:
        self.posts = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                posts.append((self.path, self.headers.get('Content-Type'), body))
                self.send_response(200)
                self.send_header('Content-Type', 'application/x-protobuf')
                self.send_header('Content-Length', '0')
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = f'http://127.0.0.1:{self.server.server_address[1]}'
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)
        self._thread.start()

    def spans(self):
        out = []
        for path, content_type, body in self.posts:
            assert path == '/v1/traces' and content_type == 'application/x-protobuf'
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    out.extend(scope_spans.spans)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


@pytest.mark.slow
def test_a_serial_run_exports_its_spans_to_an_otlp_endpoint(tmp_path, monkeypatch):
    from ding.entry import serial_pipeline

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    monkeypatch.setenv('DING_QUIET', '1')
    mod = importlib.import_module('dizoo.classic_control.cartpole.config.cartpole_dqn_config')
    cfg = EasyDict(copy.deepcopy(dict(mod.main_config)))
    cfg.exp_name = 'otlp_exp'
    cfg.env.update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    cfg.policy.model.encoder_hidden_size_list = [32, 32]
    cfg.policy.eval.evaluator.eval_freq = 100000
    cfg.policy.learn.learner = dict(hook=dict(save_ckpt_after_iter=3, log_show_after_iter=1000))
    collector = OtlpCollector()
    try:
        cfg.service = dict(tracing=dict(enable=True, otlp_endpoint=collector.url, service_name='otlp-test'))
        serial_pipeline((cfg, EasyDict(copy.deepcopy(dict(mod.create_config)))), seed=0, max_train_iter=6)
        spans = collector.spans()  # the run's close flushed the batch exporter
    finally:
        collector.close()
    names = {}
    for span in spans:
        names.setdefault(span.name, []).append(span)
    (run,) = names['learner.run']
    assert run.parent_span_id == b''
    assert len(names['learner.train_iter']) >= 6 and len(names['learner.checkpoint']) >= 2
    assert all(s.parent_span_id == run.span_id for s in names['learner.train_iter'] + names['learner.sample'])
    iteration_ids = {s.span_id for s in names['learner.train_iter']}
    assert all(s.parent_span_id in iteration_ids | {run.span_id} for s in names['learner.checkpoint'])


def test_tracing_config_is_checked_up_front(monkeypatch):
    with pytest.raises(ConfigError, match="service.tracing.otlp_endpoint: expected None or 'http"):
        check_service_config({'tracing': {'enable': True, 'otlp_endpoint': '127.0.0.1:4318'}})
    with pytest.raises(ConfigError, match=r'unknown key\(s\) in service.tracing: endpoint'):
        check_service_config({'tracing': {'endpoint': 'http://127.0.0.1:4318'}})
    # Without the extra installed, enabling tracing names it.
    monkeypatch.setattr('ding.service.OTEL_MODULES', ('opentelemetry.sdk', 'no_such_module_for_ding_tests'))
    with pytest.raises(ConfigError, match=r"pip install 'ding\[otel\]'"):
        check_service_config({'tracing': {'enable': True}})
    assert check_service_config({'tracing': {'enable': False}}).tracing.enable is False
