--
-- PostgreSQL database dump
--

\restrict r4LowYwEMPe2u6cz5Sh0L4JbkvWYUfv899oKgepRVjfs6YMEPTpuyoy5pX8oieu

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: golden_schema; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA golden_schema;


--
-- Name: onward_fence(text[], text[], bigint[]); Type: FUNCTION; Schema: golden_schema; Owner: -
--

CREATE FUNCTION golden_schema.onward_fence(threads text[], owners text[], epochs bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(threads, 1), 0) LOOP
        PERFORM 1 FROM onward_leases
        WHERE thread_id = threads[i] AND owner = owners[i] AND epoch = epochs[i] FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the lease of run % is not this driver''s any more', threads[i]
                USING ERRCODE = 'OW001', DETAIL = threads[i];
        END IF;
    END LOOP;
END
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: checkpoint_blobs; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.checkpoint_blobs (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    channel text NOT NULL,
    version text NOT NULL,
    type text NOT NULL,
    blob bytea
);


--
-- Name: checkpoint_migrations; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.checkpoint_migrations (
    v integer NOT NULL
);


--
-- Name: checkpoint_writes; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.checkpoint_writes (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    channel text NOT NULL,
    type text,
    blob bytea NOT NULL,
    task_path text DEFAULT ''::text NOT NULL
);


--
-- Name: checkpoints; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.checkpoints (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    checkpoint_id text NOT NULL,
    parent_checkpoint_id text,
    type text,
    checkpoint jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL
);


--
-- Name: onward_api_run_events; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_api_run_events (
    run_id text NOT NULL,
    seq integer NOT NULL,
    thread_id text NOT NULL,
    event text NOT NULL,
    data text
);


--
-- Name: onward_api_runs; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_api_runs (
    run_id text NOT NULL,
    thread_id text NOT NULL,
    assistant_id text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    status text NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL,
    pause_before text DEFAULT '[]'::text NOT NULL,
    from_checkpoint text,
    request text,
    multitask_strategy text DEFAULT 'enqueue'::text NOT NULL,
    pause_after text DEFAULT '[]'::text NOT NULL,
    webhook text,
    stream_mode text DEFAULT '[]'::text NOT NULL,
    cancel text
);


--
-- Name: onward_artifact_refs; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_artifact_refs (
    thread_id text NOT NULL,
    sha256 text NOT NULL
);


--
-- Name: onward_artifacts; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_artifacts (
    sha256 text NOT NULL,
    body bytea NOT NULL
);


--
-- Name: onward_assistants; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_assistants (
    assistant_id text NOT NULL,
    version integer NOT NULL,
    graph_id text NOT NULL,
    name text NOT NULL,
    description text,
    context text DEFAULT '{}'::text NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL,
    owner text,
    created_at text NOT NULL,
    latest integer DEFAULT 0 NOT NULL
);


--
-- Name: onward_breakers; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_breakers (
    service text NOT NULL,
    state text NOT NULL,
    outcomes text DEFAULT ''::text NOT NULL,
    consecutive integer DEFAULT 0 NOT NULL,
    opened_at text,
    probe_at text,
    probe_owner text,
    updated_at text NOT NULL
);


--
-- Name: onward_crons; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_crons (
    cron_id text NOT NULL,
    owner text NOT NULL,
    thread_id text,
    assistant_id text NOT NULL,
    schedule text NOT NULL,
    timezone text,
    payload text NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL,
    on_run_completed text,
    enabled integer DEFAULT 1 NOT NULL,
    end_time text,
    next_run_date text,
    created_at text NOT NULL,
    updated_at text NOT NULL
);


--
-- Name: onward_effects; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_effects (
    key text NOT NULL,
    thread_id text NOT NULL,
    step_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    status text NOT NULL,
    result text,
    started_at text NOT NULL,
    completed_at text,
    calls integer DEFAULT 1 NOT NULL,
    compensable integer DEFAULT 0 NOT NULL
);


--
-- Name: onward_events; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_events (
    id bigint NOT NULL,
    thread_id text NOT NULL,
    at text NOT NULL,
    kind text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    dedupe text
);


--
-- Name: onward_events_id_seq; Type: SEQUENCE; Schema: golden_schema; Owner: -
--

CREATE SEQUENCE golden_schema.onward_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: onward_events_id_seq; Type: SEQUENCE OWNED BY; Schema: golden_schema; Owner: -
--

ALTER SEQUENCE golden_schema.onward_events_id_seq OWNED BY golden_schema.onward_events.id;


--
-- Name: onward_lease_epochs; Type: SEQUENCE; Schema: golden_schema; Owner: -
--

CREATE SEQUENCE golden_schema.onward_lease_epochs
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: onward_leases; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_leases (
    thread_id text NOT NULL,
    owner text NOT NULL,
    acquired_at text NOT NULL,
    heartbeat_at text NOT NULL,
    expires_at text NOT NULL,
    epoch bigint DEFAULT 0 NOT NULL
);


--
-- Name: onward_meta; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_meta (
    key text NOT NULL,
    value text NOT NULL
);


--
-- Name: onward_queue; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_queue (
    thread_id text NOT NULL,
    ready_at double precision,
    claimed_by text,
    claimed_at double precision,
    enqueued_at double precision NOT NULL,
    for_person integer DEFAULT 0 NOT NULL
);


--
-- Name: onward_requests; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_requests (
    thread_id text NOT NULL,
    request text NOT NULL
);


--
-- Name: onward_runs; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_runs (
    thread_id text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    status text NOT NULL,
    objective text NOT NULL,
    request text NOT NULL
);


--
-- Name: onward_threads; Type: TABLE; Schema: golden_schema; Owner: -
--

CREATE TABLE golden_schema.onward_threads (
    thread_id text NOT NULL,
    owner text,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL
);


--
-- Name: onward_events id; Type: DEFAULT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_events ALTER COLUMN id SET DEFAULT nextval('golden_schema.onward_events_id_seq'::regclass);


--
-- Data for Name: checkpoint_blobs; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', '__start__', '00000000000000000000000000000001.0.4824880385992407', 'msgpack-z2', '\x5866e7d758ad9d99bf4ac35014c691e27b747035495bd4d8d5c5c5cd3ddc26572b367f68a28b088ad8c1c554fa00069ab45529f4010a17177d05dfc62fe72612254aea123a84fb7d3949cfef70bef7dab21c2419d6f8ed57cb1cbeddaf8f9629be7024da3a38c095bc9f2add339b392ffbe9f540f6d8c1049d01dbf8e0e9d8ed59dca9838f0b6659f863bb586b1ba7f80081a5053e710f35e706721406cfec6a9c9231a613692d26401bf1176b3eea6a607baa4496d145b0a206dc0f7c552aabe72d395fed559aaf0a7ecb44e9a5de4cf2112e4108d337f96fbb630232dd3145a74240c22d59f9d11d9e2a6244e8b1e3ba1e51fa3aa65971ad00eb30db22c647277d3f486492123e17b294c798d21411536af13ab3119b20de70b8208d4eb9c67ce3824e5448f1b2381e442cd31499dc70204d8731c927484bd045e188f72ce938f33dcda924e6f92f83ee122b1836cb0dd7be59ecfcb0b84a45ac7281695691622d1e221699ff93aa3add369a9bdaf661436b6fedb69bbaa2eb3b2d4dafbaacfc0463aca73e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'goal', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\xc7430594b26f6e776172642e6d6f64656c2e7374617465a4476f616c81a96f626a656374697665aa676f6c64656e2072756eb36d6f64656c5f76616c69646174655f6a736f6e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'plan', '00000000000000000000000000000002.0.33873736055924164', 'msgpack-z2', '\x5866e7d758ad3bc1a4cb7e8249d36112d8a993195700b31370143f3565f29485890b9316262f4c39caf8b00b58dc2f4c0457264bf2f2f30bc0154ae35270b38611a95e99001df05a9a9659545cb20c32e83f6135d2b0ff82a5e081ff034bc103ec8756e60247f88123f179a907c0762461b7639d4a35d8443db08db5c835d9c244a89d07a0d64d6c83f86cc252b0f5cb8003fbc00c0f74516a4e0ac4c55077af8015a007d6c158f160550748707032760733a3383109cd89a484480a760b56404304392c2601632c993cab8e683040410a9416658430caa0f443280d001c36f3b3');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'budget', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\xc7300594b26f6e776172642e6d6f64656c2e7374617465a642756467657480b36d6f64656c5f76616c69646174655f6a736f6e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'tool_modules', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\x90');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'waiting', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\x80');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'policy', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\xc7340594b36f6e776172642e706f6c69636965732e72756ea952756e506f6c69637980b36d6f64656c5f76616c69646174655f6a736f6e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'started_at', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\xc7430394a86461746574696d65a86461746574696d65d920323032362d31322d30365431303a35393a32382e3838373330382b30303a3030ad66726f6d69736f666f726d6174');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'usage', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\xc72f0594b26f6e776172642e6d6f64656c2e7374617465a5557361676580b36d6f64656c5f76616c69646174655f6a736f6e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'budget_warnings', '00000000000000000000000000000002.0.33873736055924164', 'msgpack', '\x90');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', 'usage', '00000000000000000000000000000003.0.7621946031844994', 'msgpack', '\xc72f0594b26f6e776172642e6d6f64656c2e7374617465a5557361676580b36d6f64656c5f76616c69646174655f6a736f6e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', '__pregel_tasks', '00000000000000000000000000000003.0.7621946031844994', 'msgpack-z2', '\x5866e7d758ad03564ae6842aa5138cd8c7c9b0d44ad1846ba58589e04a69495e7e7e01b8626a5c0a6e1ec106cb96a6651615631d9781d54ed85b4968b5d3c2447c95d34d05fd92dc027d481d179f019c89d12f492d2e29d64fcfcf4949cdd32f3326a2f602005aee867b');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', '__pregel_tasks', '00000000000000000000000000000004.0.06080274418448528', 'msgpack', '\x90');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', '__pregel_tasks', '00000000000000000000000000000005.0.8772723816018734', 'msgpack-z2', '\x5866e7d758ad9b7882691ba14ae904d36482b5522ba4563a80bf566a05561b0b93c095d292bcfcfc0270c5d4b814dc3c5aa7529d9659545ca207e6d522d7560b139741e60f261ef7669db20b5a33814322333911349ba007915fe65a580accdd4d4bd33253735220e64248466cd50fbe2a107b530cad0a5c9884d508c87c5a23d01540ff9c60e42072f40fa21ed7d89f89859181459aa58991458a998999b149528a45aa91455a9ab18969529a416a629299418aa971b2a1455aa2515a524a9241926552b261aa85494a9a5192699a197cec8f5283c0637fdcb0b1bfe5e0e0b535040f01aeae56027395ac0c6bf1b50d6e2ae897e416e84322323e033811a65f925a5c52ac9f9e9f93929aa75f664c44e30100aebb173e');
INSERT INTO golden_schema.checkpoint_blobs VALUES ('golden-thread', '', '__pregel_tasks', '00000000000000000000000000000006.0.09076349159407304', 'msgpack', '\x90');


--
-- Data for Name: checkpoint_migrations; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.checkpoint_migrations VALUES (0);
INSERT INTO golden_schema.checkpoint_migrations VALUES (1);
INSERT INTO golden_schema.checkpoint_migrations VALUES (2);
INSERT INTO golden_schema.checkpoint_migrations VALUES (3);
INSERT INTO golden_schema.checkpoint_migrations VALUES (4);
INSERT INTO golden_schema.checkpoint_migrations VALUES (5);
INSERT INTO golden_schema.checkpoint_migrations VALUES (6);
INSERT INTO golden_schema.checkpoint_migrations VALUES (7);
INSERT INTO golden_schema.checkpoint_migrations VALUES (8);
INSERT INTO golden_schema.checkpoint_migrations VALUES (9);


--
-- Data for Name: checkpoint_writes; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 0, 'schema_version', 'msgpack', '\x01', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 1, 'messages', 'msgpack', '\x91c7b40594bd6c616e67636861696e5f636f72652e6d657373616765732e68756d616eac48756d616e4d65737361676586a7636f6e74656e74aa676f6c64656e2072756eb16164646974696f6e616c5f6b776172677380b1726573706f6e73655f6d6574616461746180a474797065a568756d616ea46e616d65c0a26964d92462626330386164322d306165632d346536642d626364632d383535633634616433346333b36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 2, 'workdir', 'msgpack', '\xd9202f746d702f6f6e776172645f686561642f74657374732f676f6c64656e2f7633', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 3, 'goal', 'msgpack', '\xc7430594b26f6e776172642e6d6f64656c2e7374617465a4476f616c81a96f626a656374697665aa676f6c64656e2072756eb36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 4, 'plan', 'msgpack-z2', '\x5866e7d758ad3bc1a4e93009ecccc98c2b80590938829f9a3279cac2c485490b9317a61c657cd8052cea1726822b922579f9f905e0caa47129b849c38854a74c800e762d4dcb2c2a2e590619f09fb01a69c87fc152f0a0ff81a5e0c1f5432b7381a3fbc051f8bcd403603b92b0dbb14ea51a6ca21ed8c65ae45a6c6122d4ce0350eb26b6417c356129d8fa65c0417d606607ba28352705e262a8bb57c00acf03eb60ac78b0aa0324383819bb8399519c9884e64452422405bb052ba021821c16938031964c9e55473418a020054a8b3242186550fa21940600efd8f2b5', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 5, 'steps', 'msgpack', '\xc7184092a573746570739690c400c4080000000000000000a00090', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 6, 'artifacts', 'msgpack', '\xc7194092a96172746966616374739390c400c4080000000000000000', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 7, 'budget', 'msgpack', '\xc7300594b26f6e776172642e6d6f64656c2e7374617465a642756467657480b36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 8, 'tool_modules', 'msgpack', '\x90', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 9, 'max_concurrency', 'msgpack', '\x04', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 10, 'wave', 'msgpack', '\x01', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 11, 'waiting', 'msgpack', '\x80', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 12, 'decisions', 'msgpack', '\x90', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 13, 'approvals', 'msgpack', '\x80', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 14, 'plan_approval', 'null', '\x', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 15, 'policy', 'msgpack', '\xc7340594b36f6e776172642e706f6c69636965732e72756ea952756e506f6c69637980b36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 16, 'started_at', 'msgpack', '\xc7430394a86461746574696d65a86461746574696d65d920323032362d31322d30365431303a35393a32382e3838373330382b30303a3030ad66726f6d69736f666f726d6174', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 17, 'resume_at', 'null', '\x', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 18, 'usage', 'msgpack', '\xc72f0594b26f6e776172642e6d6f64656c2e7374617465a5557361676580b36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 19, 'budget_warnings', 'msgpack', '\x90', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 20, 'status', 'msgpack', '\xc7270093b26f6e776172642e6d6f64656c2e7374617465a952756e537461747573a8706c616e6e696e67', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 21, 'failure', 'null', '\x', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', '015ada8b-d5c2-3e41-8e2d-31f48adfc87f', 22, 'branch:to:plan', 'null', '\x', '~__pregel_pull, __start__');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbc8-667e-8000-eb1b8e137633', '8d6778c3-c997-a59e-2a2b-b6cbb998170f', 0, 'status', 'msgpack', '\xc7260093b26f6e776172642e6d6f64656c2e7374617465a952756e537461747573a772756e6e696e67', '~__pregel_pull, plan');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbc8-667e-8000-eb1b8e137633', '8d6778c3-c997-a59e-2a2b-b6cbb998170f', 1, 'usage', 'msgpack', '\xc72f0594b26f6e776172642e6d6f64656c2e7374617465a5557361676580b36d6f64656c5f76616c69646174655f6a736f6e', '~__pregel_pull, plan');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbc8-667e-8000-eb1b8e137633', '8d6778c3-c997-a59e-2a2b-b6cbb998170f', 2, 'messages', 'msgpack-z2', '\x5866e7d758ad03564a6aac5376812a25a04260610d2cdd53f560a5a45e62e64a474f5f4899d9b91c98d381a3eb253743b4b440f58c4299a196968206300302c7fd53533475144c14c0865a7119ea292424265829e4e5e7177019013949308e3190930ce39800392950cec6c49414609ecf078e78c76703d326b0c6da084cfd05c0e8488d074eb12402bd93d8b00454692e4acc040f971d00b7c492124d4d0dcc8c4d742d93cc8d754d524c53812d319344dd544b936463cb140333434bd355e0720d3c7d326153661eb812024feb40c5d681f30edc9a03d82a2b00a5f16f6d', '~__pregel_pull, plan');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbc8-667e-8000-eb1b8e137633', '8d6778c3-c997-a59e-2a2b-b6cbb998170f', 3, '__pregel_tasks', 'msgpack-z2', '\x5866e7d758ad3bc1684ea84e3ac1887d980c4ba5144db8525a9808ae9396e4e5e71780eba5c6a5e0d6116cac6c695a665131d6611958e584bd918456392d4cc45737dd54d02fc92dd0875471f119c08918fd92d4e29262fdf4fc9c94d43cfd3263222a2f00a7e285ea', '~__pregel_pull, plan');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbff-6225-8001-3b8202cb66f6', '0c9a2fcd-1ceb-07a7-2cce-84b46ee892d0', 0, 'steps', 'msgpack-z2', '\x5866e7d758ad6b5c987882498350710f1a065b98488551d2138c1c440e852d4dcb2c2a2ec135106662616460916669626491626662666c929462916a649196666c629a9466909a98646690626a9c6c689196689496949264906499946c986a6192926694649a66061f08a3d420f04018376c206c39b8a1676b081e0f5b5dad04e62a5919d652d2f83134d235300b3134b032b5b432b204367e8c0ccc4dc81f1ac330cedcd000ab71d8dc0c007192cc5e', '~__pregel_push, 0000000000, 0000000000');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bbff-6225-8001-3b8202cb66f6', '0c9a2fcd-1ceb-07a7-2cce-84b46ee892d0', 1, 'branch:to:verify', 'null', '\x', '~__pregel_push, 0000000000, 0000000000');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bc4d-60cc-8002-d95eeb734608', 'f161da6c-4117-75c4-b6f9-8398c611be41', 0, 'steps', 'msgpack-z2', '\x5866e7d758ada5d8310ac240100550b412bc45b0156626b39bd980b7f0023bd90cd8aa9d5878941462e145722c75411b238a29a7f94cf5f9bc5317fbe9e25bdd3f18ac8b2315ac9fcc7e64b0b36db6bbfd27046321100b4c923cfb9235494b6256b2538336aa87e4ca06c5229926050dda602b9c8cd4997f21d8d8a08c60f327825df2c85b61b6b0eba1c86751e371ccf0415a825f23d42ed414eec387a0e2ff59ec2dae42188c1bfaf906aba5caa2', '~__pregel_pull, verify');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bc4d-60cc-8002-d95eeb734608', 'f161da6c-4117-75c4-b6f9-8398c611be41', 1, 'artifacts', 'msgpack-z2', '\x5866e7d758ad6b5c9a9659545c72829183c8212a887a5c03542616460616699626461629662666c626492916a946166969c626a6496906a98949660629a6c6c986166989466949294906499649c986a9162629694649a66966f0012a4a0d020f5071c306a896831b60b686e071aad5d54a60ae9295612db64a09008e8860e0', '~__pregel_pull, verify');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-bc4d-60cc-8002-d95eeb734608', 'f161da6c-4117-75c4-b6f9-8398c611be41', 2, '__pregel_tasks', 'msgpack-z2', '\x5866e7d758ad3bc1b48d509d74826932c14aa91552291dc05f29b5026b8d8549e03a69495e7e7e01b85e6a5c0a6e1dad53a94ecb2c2a2ed103f36a912bab8589cb20d307138f7bb34ed905ad98c00191999c089a4cd083c82f732d2c0566eea6a56999a939291073212423b6da075f0d88bd258656032e4cc26a04643aad11e80aa07f4e30721039f807518f6be8cfc4c2c8c022cdd2c4c822c5ccc4ccd82429c522d5c8222dcdd8c43429cd203531c9cc20c5d438d9d0222dd1282d2925c920c93229d930d5c22425cd28c934cd0c3ef447a941e0a13f6ed8d0df7270f0da1a82470057572b81b94a5686b5f89a063715f44b720bf42111199f019c07d32f492d2e29d64fcfcf4949cdd32f3326a2ed000022c016ad', '~__pregel_pull, verify');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-be25-62ea-8003-7fcb79616705', 'e1065189-b28b-92a5-4a5a-3f17dae143b1', 0, 'steps', 'msgpack-z2', '\x5866e7d758adadd8310ec2300c0550c186b845370650ec389613895b7081ba892f8118384a27865ea4c7a2448205212acae8e55b5eacaf77ed755cefbebdfb0783f5fa07251d579b9914362d9b284c3f4918093ab1482899893d69968262e629a8b9d22abb1c7c07622d9a66751ab58322940d3518bf246c695095b0ed53c26eb5e91da182d8706eead824b82c693f807bc7277029c484f1301dce42bfdbd85b5c14cf736dec0e1377ccb2', '~__pregel_push, 0000000000, 0000000000');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-be25-62ea-8003-7fcb79616705', 'e1065189-b28b-92a5-4a5a-3f17dae143b1', 1, 'branch:to:verify', 'null', '\x', '~__pregel_push, 0000000000, 0000000000');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-be52-67ab-8004-a1f2d0916da4', 'ba3117e7-bbfd-d459-2695-e45d525039b3', 0, 'steps', 'msgpack-z2', '\x5866e7d758ada5d8310a02410c0550b4136fb160a96432999019f0165e60b3b3b984587894ad2cbcc81ecb71401b1117a74cf3439af079d749e7f5eed7bb7f32d8a48d0a36af360b19ac2c2a0ca6df148c04412c124a66624f9a654431f314d460ec9521073f38b11e4db382461ddc28940d3518bf15ac35a82ad8f6a560b7daf28eae62d8fddcd5b14beed2d27c1cee814f0e528809e3a11cce42ffbbd8475c14cf4b5dec014bc2caf6', '~__pregel_pull, verify');
INSERT INTO golden_schema.checkpoint_writes VALUES ('golden-thread', '', '1f1f1641-be52-67ab-8004-a1f2d0916da4', 'ba3117e7-bbfd-d459-2695-e45d525039b3', 1, '__pregel_tasks', 'msgpack-z2', '\x5866e7d758ad3bc16841a84e3ac1284a6ca51443b8525a980cae9396e4e5e71780eba5c6a5e0d6113372f5b430095fed84bd9584563b2d4cc65739dd54d02fc92dd087d471f119c09918fd92d4e29262fdf4fc9c94d43cfd3263226a2f00114e862c', '~__pregel_pull, verify');


--
-- Data for Name: checkpoints; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-bb96-639a-bfff-4a0121fe9729', NULL, NULL, '{"v": 4, "id": "1f1f1641-bb96-639a-bfff-4a0121fe9729", "ts": "2026-12-06T10:59:28.935401+00:00", "versions_seen": {"__input__": {}}, "channel_values": {}, "channel_versions": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}, "updated_channels": ["__start__"]}', '{"step": -1, "source": "input", "parents": {}, "counters_since_delta_snapshot": {"plan": [0, 1], "steps": [0, 1], "messages": [0, 1], "approvals": [0, 1], "artifacts": [0, 1], "decisions": [0, 1]}}');
INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-bbc8-667e-8000-eb1b8e137633', '1f1f1641-bb96-639a-bfff-4a0121fe9729', NULL, '{"v": 4, "id": "1f1f1641-bbc8-667e-8000-eb1b8e137633", "ts": "2026-12-06T10:59:28.955936+00:00", "versions_seen": {"__input__": {}, "__start__": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}}, "channel_values": {"plan": true, "wave": 1, "status": "planning", "failure": null, "workdir": "/tmp/onward_head/tests/golden/v3", "resume_at": null, "plan_approval": null, "branch:to:plan": null, "schema_version": 1, "max_concurrency": 4}, "channel_versions": {"goal": "00000000000000000000000000000002.0.33873736055924164", "plan": "00000000000000000000000000000002.0.33873736055924164", "wave": "00000000000000000000000000000002.0.33873736055924164", "steps": "00000000000000000000000000000002.0.33873736055924164", "usage": "00000000000000000000000000000002.0.33873736055924164", "budget": "00000000000000000000000000000002.0.33873736055924164", "policy": "00000000000000000000000000000002.0.33873736055924164", "status": "00000000000000000000000000000002.0.33873736055924164", "failure": "00000000000000000000000000000002.0.33873736055924164", "waiting": "00000000000000000000000000000002.0.33873736055924164", "workdir": "00000000000000000000000000000002.0.33873736055924164", "messages": "00000000000000000000000000000002.0.33873736055924164", "__start__": "00000000000000000000000000000002.0.33873736055924164", "approvals": "00000000000000000000000000000002.0.33873736055924164", "artifacts": "00000000000000000000000000000002.0.33873736055924164", "decisions": "00000000000000000000000000000002.0.33873736055924164", "resume_at": "00000000000000000000000000000002.0.33873736055924164", "started_at": "00000000000000000000000000000002.0.33873736055924164", "tool_modules": "00000000000000000000000000000002.0.33873736055924164", "plan_approval": "00000000000000000000000000000002.0.33873736055924164", "branch:to:plan": "00000000000000000000000000000002.0.33873736055924164", "schema_version": "00000000000000000000000000000002.0.33873736055924164", "budget_warnings": "00000000000000000000000000000002.0.33873736055924164", "max_concurrency": "00000000000000000000000000000002.0.33873736055924164"}, "updated_channels": ["approvals", "artifacts", "branch:to:plan", "budget", "budget_warnings", "decisions", "failure", "goal", "max_concurrency", "messages", "plan", "plan_approval", "policy", "resume_at", "schema_version", "started_at", "status", "steps", "tool_modules", "usage", "waiting", "wave", "workdir"]}', '{"step": 0, "source": "loop", "parents": {}, "counters_since_delta_snapshot": {"steps": [1, 2], "messages": [1, 2], "approvals": [1, 2], "artifacts": [1, 2], "decisions": [1, 2]}}');
INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-bbff-6225-8001-3b8202cb66f6', '1f1f1641-bbc8-667e-8000-eb1b8e137633', NULL, '{"v": 4, "id": "1f1f1641-bbff-6225-8001-3b8202cb66f6", "ts": "2026-12-06T10:59:28.978354+00:00", "versions_seen": {"plan": {"branch:to:plan": "00000000000000000000000000000002.0.33873736055924164"}, "__input__": {}, "__start__": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}}, "channel_values": {"wave": 1, "status": "running", "failure": null, "workdir": "/tmp/onward_head/tests/golden/v3", "resume_at": null, "plan_approval": null, "schema_version": 1, "max_concurrency": 4}, "channel_versions": {"goal": "00000000000000000000000000000002.0.33873736055924164", "plan": "00000000000000000000000000000002.0.33873736055924164", "wave": "00000000000000000000000000000002.0.33873736055924164", "steps": "00000000000000000000000000000002.0.33873736055924164", "usage": "00000000000000000000000000000003.0.7621946031844994", "budget": "00000000000000000000000000000002.0.33873736055924164", "policy": "00000000000000000000000000000002.0.33873736055924164", "status": "00000000000000000000000000000003.0.7621946031844994", "failure": "00000000000000000000000000000002.0.33873736055924164", "waiting": "00000000000000000000000000000002.0.33873736055924164", "workdir": "00000000000000000000000000000002.0.33873736055924164", "messages": "00000000000000000000000000000003.0.7621946031844994", "__start__": "00000000000000000000000000000002.0.33873736055924164", "approvals": "00000000000000000000000000000002.0.33873736055924164", "artifacts": "00000000000000000000000000000002.0.33873736055924164", "decisions": "00000000000000000000000000000002.0.33873736055924164", "resume_at": "00000000000000000000000000000002.0.33873736055924164", "started_at": "00000000000000000000000000000002.0.33873736055924164", "tool_modules": "00000000000000000000000000000002.0.33873736055924164", "plan_approval": "00000000000000000000000000000002.0.33873736055924164", "__pregel_tasks": "00000000000000000000000000000003.0.7621946031844994", "branch:to:plan": "00000000000000000000000000000003.0.7621946031844994", "schema_version": "00000000000000000000000000000002.0.33873736055924164", "budget_warnings": "00000000000000000000000000000002.0.33873736055924164", "max_concurrency": "00000000000000000000000000000002.0.33873736055924164"}, "updated_channels": ["__pregel_tasks", "messages", "status", "usage"]}', '{"step": 1, "source": "loop", "parents": {}, "counters_since_delta_snapshot": {"plan": [0, 1], "steps": [1, 3], "messages": [2, 3], "approvals": [1, 3], "artifacts": [1, 3], "decisions": [1, 3]}}');
INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-bc4d-60cc-8002-d95eeb734608', '1f1f1641-bbff-6225-8001-3b8202cb66f6', NULL, '{"v": 4, "id": "1f1f1641-bc4d-60cc-8002-d95eeb734608", "ts": "2026-12-06T10:59:29.010270+00:00", "versions_seen": {"plan": {"branch:to:plan": "00000000000000000000000000000002.0.33873736055924164"}, "execute": {}, "__input__": {}, "__start__": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}}, "channel_values": {"wave": 1, "status": "running", "failure": null, "workdir": "/tmp/onward_head/tests/golden/v3", "resume_at": null, "plan_approval": null, "schema_version": 1, "max_concurrency": 4, "branch:to:verify": null}, "channel_versions": {"goal": "00000000000000000000000000000002.0.33873736055924164", "plan": "00000000000000000000000000000002.0.33873736055924164", "wave": "00000000000000000000000000000002.0.33873736055924164", "steps": "00000000000000000000000000000004.0.06080274418448528", "usage": "00000000000000000000000000000003.0.7621946031844994", "budget": "00000000000000000000000000000002.0.33873736055924164", "policy": "00000000000000000000000000000002.0.33873736055924164", "status": "00000000000000000000000000000003.0.7621946031844994", "failure": "00000000000000000000000000000002.0.33873736055924164", "waiting": "00000000000000000000000000000002.0.33873736055924164", "workdir": "00000000000000000000000000000002.0.33873736055924164", "messages": "00000000000000000000000000000003.0.7621946031844994", "__start__": "00000000000000000000000000000002.0.33873736055924164", "approvals": "00000000000000000000000000000002.0.33873736055924164", "artifacts": "00000000000000000000000000000002.0.33873736055924164", "decisions": "00000000000000000000000000000002.0.33873736055924164", "resume_at": "00000000000000000000000000000002.0.33873736055924164", "started_at": "00000000000000000000000000000002.0.33873736055924164", "tool_modules": "00000000000000000000000000000002.0.33873736055924164", "plan_approval": "00000000000000000000000000000002.0.33873736055924164", "__pregel_tasks": "00000000000000000000000000000004.0.06080274418448528", "branch:to:plan": "00000000000000000000000000000003.0.7621946031844994", "schema_version": "00000000000000000000000000000002.0.33873736055924164", "budget_warnings": "00000000000000000000000000000002.0.33873736055924164", "max_concurrency": "00000000000000000000000000000002.0.33873736055924164", "branch:to:verify": "00000000000000000000000000000004.0.06080274418448528"}, "updated_channels": ["branch:to:verify", "steps"]}', '{"step": 2, "source": "loop", "parents": {}, "counters_since_delta_snapshot": {"plan": [0, 2], "steps": [2, 4], "messages": [2, 4], "approvals": [1, 4], "artifacts": [1, 4], "decisions": [1, 4]}}');
INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-be25-62ea-8003-7fcb79616705', '1f1f1641-bc4d-60cc-8002-d95eeb734608', NULL, '{"v": 4, "id": "1f1f1641-be25-62ea-8003-7fcb79616705", "ts": "2026-12-06T10:59:29.203652+00:00", "versions_seen": {"plan": {"branch:to:plan": "00000000000000000000000000000002.0.33873736055924164"}, "verify": {"branch:to:verify": "00000000000000000000000000000004.0.06080274418448528"}, "execute": {}, "__input__": {}, "__start__": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}}, "channel_values": {"wave": 1, "status": "running", "failure": null, "workdir": "/tmp/onward_head/tests/golden/v3", "resume_at": null, "plan_approval": null, "schema_version": 1, "max_concurrency": 4}, "channel_versions": {"goal": "00000000000000000000000000000002.0.33873736055924164", "plan": "00000000000000000000000000000002.0.33873736055924164", "wave": "00000000000000000000000000000002.0.33873736055924164", "steps": "00000000000000000000000000000005.0.8772723816018734", "usage": "00000000000000000000000000000003.0.7621946031844994", "budget": "00000000000000000000000000000002.0.33873736055924164", "policy": "00000000000000000000000000000002.0.33873736055924164", "status": "00000000000000000000000000000003.0.7621946031844994", "failure": "00000000000000000000000000000002.0.33873736055924164", "waiting": "00000000000000000000000000000002.0.33873736055924164", "workdir": "00000000000000000000000000000002.0.33873736055924164", "messages": "00000000000000000000000000000003.0.7621946031844994", "__start__": "00000000000000000000000000000002.0.33873736055924164", "approvals": "00000000000000000000000000000002.0.33873736055924164", "artifacts": "00000000000000000000000000000005.0.8772723816018734", "decisions": "00000000000000000000000000000002.0.33873736055924164", "resume_at": "00000000000000000000000000000002.0.33873736055924164", "started_at": "00000000000000000000000000000002.0.33873736055924164", "tool_modules": "00000000000000000000000000000002.0.33873736055924164", "plan_approval": "00000000000000000000000000000002.0.33873736055924164", "__pregel_tasks": "00000000000000000000000000000005.0.8772723816018734", "branch:to:plan": "00000000000000000000000000000003.0.7621946031844994", "schema_version": "00000000000000000000000000000002.0.33873736055924164", "budget_warnings": "00000000000000000000000000000002.0.33873736055924164", "max_concurrency": "00000000000000000000000000000002.0.33873736055924164", "branch:to:verify": "00000000000000000000000000000005.0.8772723816018734"}, "updated_channels": ["__pregel_tasks", "artifacts", "steps"]}', '{"step": 3, "source": "loop", "parents": {}, "counters_since_delta_snapshot": {"plan": [0, 3], "steps": [3, 5], "messages": [2, 5], "approvals": [1, 5], "artifacts": [2, 5], "decisions": [1, 5]}}');
INSERT INTO golden_schema.checkpoints VALUES ('golden-thread', '', '1f1f1641-be52-67ab-8004-a1f2d0916da4', '1f1f1641-be25-62ea-8003-7fcb79616705', NULL, '{"v": 4, "id": "1f1f1641-be52-67ab-8004-a1f2d0916da4", "ts": "2026-12-06T10:59:29.222202+00:00", "versions_seen": {"plan": {"branch:to:plan": "00000000000000000000000000000002.0.33873736055924164"}, "verify": {"branch:to:verify": "00000000000000000000000000000004.0.06080274418448528"}, "execute": {}, "__input__": {}, "__start__": {"__start__": "00000000000000000000000000000001.0.4824880385992407"}}, "channel_values": {"wave": 1, "status": "running", "failure": null, "workdir": "/tmp/onward_head/tests/golden/v3", "resume_at": null, "plan_approval": null, "schema_version": 1, "max_concurrency": 4, "branch:to:verify": null}, "channel_versions": {"goal": "00000000000000000000000000000002.0.33873736055924164", "plan": "00000000000000000000000000000002.0.33873736055924164", "wave": "00000000000000000000000000000002.0.33873736055924164", "steps": "00000000000000000000000000000006.0.09076349159407304", "usage": "00000000000000000000000000000003.0.7621946031844994", "budget": "00000000000000000000000000000002.0.33873736055924164", "policy": "00000000000000000000000000000002.0.33873736055924164", "status": "00000000000000000000000000000003.0.7621946031844994", "failure": "00000000000000000000000000000002.0.33873736055924164", "waiting": "00000000000000000000000000000002.0.33873736055924164", "workdir": "00000000000000000000000000000002.0.33873736055924164", "messages": "00000000000000000000000000000003.0.7621946031844994", "__start__": "00000000000000000000000000000002.0.33873736055924164", "approvals": "00000000000000000000000000000002.0.33873736055924164", "artifacts": "00000000000000000000000000000005.0.8772723816018734", "decisions": "00000000000000000000000000000002.0.33873736055924164", "resume_at": "00000000000000000000000000000002.0.33873736055924164", "started_at": "00000000000000000000000000000002.0.33873736055924164", "tool_modules": "00000000000000000000000000000002.0.33873736055924164", "plan_approval": "00000000000000000000000000000002.0.33873736055924164", "__pregel_tasks": "00000000000000000000000000000006.0.09076349159407304", "branch:to:plan": "00000000000000000000000000000003.0.7621946031844994", "schema_version": "00000000000000000000000000000002.0.33873736055924164", "budget_warnings": "00000000000000000000000000000002.0.33873736055924164", "max_concurrency": "00000000000000000000000000000002.0.33873736055924164", "branch:to:verify": "00000000000000000000000000000006.0.09076349159407304"}, "updated_channels": ["branch:to:verify", "steps"]}', '{"step": 4, "source": "loop", "parents": {}, "counters_since_delta_snapshot": {"plan": [0, 4], "steps": [4, 6], "messages": [2, 6], "approvals": [1, 6], "artifacts": [2, 6], "decisions": [1, 6]}}');


--
-- Data for Name: onward_api_run_events; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_api_runs; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_artifact_refs; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_artifacts; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_assistants; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_breakers; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_crons; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_effects; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_events; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.onward_events VALUES (1, 'golden-thread', '2026-12-06T10:59:28.899103+00:00', 'run_started', '{"objective":"golden run","plan_steps":4}', NULL);
INSERT INTO golden_schema.onward_events VALUES (2, 'golden-thread', '2026-12-06T10:59:28.908960+00:00', 'lease_acquired', 'vm:16819:44646:46345db9', NULL);
INSERT INTO golden_schema.onward_events VALUES (3, 'golden-thread', '2026-12-06T10:59:28.976522+00:00', 'plan_created', '{"total_steps":4,"message":"4 steps (declared)","version":1,"source":"declared"}', 'plan_created:1');
INSERT INTO golden_schema.onward_events VALUES (4, 'golden-thread', '2026-12-06T10:59:29.002161+00:00', 'step_started', '{"step_id":"a","tool":"noop","attempt":1,"args_digest":"48208f9428d64634"}', 'step_started:a:1');
INSERT INTO golden_schema.onward_events VALUES (5, 'golden-thread', '2026-12-06T10:59:29.007037+00:00', 'tool_called', '{"step_id":"a","tool":"noop","attempt":1,"args_digest":"48208f9428d64634","duration":0.004777,"summary":"value=1","effect_key":null}', 'tool_called:a:1');
INSERT INTO golden_schema.onward_events VALUES (6, 'golden-thread', '2026-12-06T10:59:29.198355+00:00', 'verified', '{"step_id":"a","tool":"noop","attempt":1,"passed":true,"findings":[]}', 'verified:a:1');
INSERT INTO golden_schema.onward_events VALUES (7, 'golden-thread', '2026-12-06T10:59:29.199498+00:00', 'step_done', '{"step_id":"a","tool":"noop","attempt":1,"message":"value=1","duration":0.00503}', 'step_done:a:1');
INSERT INTO golden_schema.onward_events VALUES (8, 'golden-thread', '2026-12-06T10:59:29.208745+00:00', 'step_started', '{"step_id":"b","tool":"noop","attempt":1,"args_digest":"ff3cd2dd9fbbc871"}', 'step_started:b:1');
INSERT INTO golden_schema.onward_events VALUES (9, 'golden-thread', '2026-12-06T10:59:29.209791+00:00', 'tool_called', '{"step_id":"b","tool":"noop","attempt":1,"args_digest":"ff3cd2dd9fbbc871","duration":0.000962,"summary":"value=1","effect_key":null}', 'tool_called:b:1');
INSERT INTO golden_schema.onward_events VALUES (10, 'golden-thread', '2026-12-06T10:59:29.316706+00:00', 'verified', '{"step_id":"b","tool":"noop","attempt":1,"passed":true,"findings":[]}', 'verified:b:1');
INSERT INTO golden_schema.onward_events VALUES (11, 'golden-thread', '2026-12-06T10:59:29.316810+00:00', 'step_done', '{"step_id":"b","tool":"noop","attempt":1,"message":"value=1","duration":0.001152}', 'step_done:b:1');
INSERT INTO golden_schema.onward_events VALUES (12, 'golden-thread', '2026-12-06T10:59:29.343608+00:00', 'lease_released', 'vm:16819:44646:46345db9', NULL);


--
-- Data for Name: onward_leases; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_meta; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.onward_meta VALUES ('schema_version', '15');


--
-- Data for Name: onward_queue; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Data for Name: onward_requests; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.onward_requests VALUES ('golden-thread', '{"input": {"schema_version": 1, "messages": [{"content": "golden run", "additional_kwargs": {}, "response_metadata": {}, "type": "human", "name": null, "id": null}], "workdir": "/tmp/onward_head/tests/golden/v3", "goal": {"objective": "golden run", "acceptance": [], "constraints": {}, "inputs": [], "judge": false}, "plan": {"version": 1, "source": "declared", "steps": [{"id": "a", "tool": "noop", "args": {"value": 1}, "depends_on": [], "output": "first", "checks": [], "description": "", "retry": null, "judge": false, "milestone": null}, {"id": "b", "tool": "noop", "args": {"value": "${first.value}"}, "depends_on": ["a"], "output": null, "checks": [{"steps": [], "check": "equals", "field": "value", "value": 1, "artifact": null, "artifact_field": null}], "description": "", "retry": null, "judge": false, "milestone": null}, {"id": "c", "tool": "noop", "args": {"value": 3}, "depends_on": ["b"], "output": null, "checks": [], "description": "", "retry": null, "judge": false, "milestone": null}, {"id": "d", "tool": "noop", "args": {"value": "${first}"}, "depends_on": ["a", "c"], "output": null, "checks": [], "description": "", "retry": null, "judge": false, "milestone": null}]}, "steps": {}, "artifacts": {}, "budget": {"max_steps": null, "steps_used": 0, "max_replans": 2, "max_run_time": null, "max_tokens": null, "max_cost": null}, "tool_modules": [], "max_concurrency": 4, "wave": 1, "waiting": {}, "decisions": [], "approvals": {}, "plan_approval": null, "policy": {"approve_tools": [], "auto_approve": [], "approve_all": false, "approve_plan": false, "confine_paths": false, "escalate_failures": true, "allow_tools": null, "deadline": {"remind_after": "PT6H", "expire_after": "P1D", "on_expiry": "reject"}, "tool_deadlines": {}, "max_plan_steps": 300, "judge_failure": "pause"}, "started_at": "2026-12-06T10:59:28.887308Z", "resume_at": null, "usage": {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}, "budget_warnings": [], "status": "planning", "failure": null}}');


--
-- Data for Name: onward_runs; Type: TABLE DATA; Schema: golden_schema; Owner: -
--

INSERT INTO golden_schema.onward_runs VALUES ('golden-thread', '2026-12-06T10:59:28.887554+00:00', '2026-12-06T10:59:28.925252+00:00', 'running', 'golden run', '');


--
-- Data for Name: onward_threads; Type: TABLE DATA; Schema: golden_schema; Owner: -
--



--
-- Name: onward_events_id_seq; Type: SEQUENCE SET; Schema: golden_schema; Owner: -
--

SELECT pg_catalog.setval('golden_schema.onward_events_id_seq', 12, true);


--
-- Name: onward_lease_epochs; Type: SEQUENCE SET; Schema: golden_schema; Owner: -
--

SELECT pg_catalog.setval('golden_schema.onward_lease_epochs', 1, true);


--
-- Name: checkpoint_blobs checkpoint_blobs_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.checkpoint_blobs
    ADD CONSTRAINT checkpoint_blobs_pkey PRIMARY KEY (thread_id, checkpoint_ns, channel, version);


--
-- Name: checkpoint_migrations checkpoint_migrations_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.checkpoint_migrations
    ADD CONSTRAINT checkpoint_migrations_pkey PRIMARY KEY (v);


--
-- Name: checkpoint_writes checkpoint_writes_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.checkpoint_writes
    ADD CONSTRAINT checkpoint_writes_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx);


--
-- Name: checkpoints checkpoints_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.checkpoints
    ADD CONSTRAINT checkpoints_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id);


--
-- Name: onward_api_run_events onward_api_run_events_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_api_run_events
    ADD CONSTRAINT onward_api_run_events_pkey PRIMARY KEY (run_id, seq);


--
-- Name: onward_api_runs onward_api_runs_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_api_runs
    ADD CONSTRAINT onward_api_runs_pkey PRIMARY KEY (run_id);


--
-- Name: onward_artifact_refs onward_artifact_refs_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_artifact_refs
    ADD CONSTRAINT onward_artifact_refs_pkey PRIMARY KEY (thread_id, sha256);


--
-- Name: onward_artifacts onward_artifacts_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_artifacts
    ADD CONSTRAINT onward_artifacts_pkey PRIMARY KEY (sha256);


--
-- Name: onward_assistants onward_assistants_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_assistants
    ADD CONSTRAINT onward_assistants_pkey PRIMARY KEY (assistant_id, version);


--
-- Name: onward_breakers onward_breakers_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_breakers
    ADD CONSTRAINT onward_breakers_pkey PRIMARY KEY (service);


--
-- Name: onward_crons onward_crons_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_crons
    ADD CONSTRAINT onward_crons_pkey PRIMARY KEY (cron_id);


--
-- Name: onward_effects onward_effects_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_effects
    ADD CONSTRAINT onward_effects_pkey PRIMARY KEY (key);


--
-- Name: onward_events onward_events_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_events
    ADD CONSTRAINT onward_events_pkey PRIMARY KEY (id);


--
-- Name: onward_leases onward_leases_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_leases
    ADD CONSTRAINT onward_leases_pkey PRIMARY KEY (thread_id);


--
-- Name: onward_meta onward_meta_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_meta
    ADD CONSTRAINT onward_meta_pkey PRIMARY KEY (key);


--
-- Name: onward_queue onward_queue_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_queue
    ADD CONSTRAINT onward_queue_pkey PRIMARY KEY (thread_id);


--
-- Name: onward_requests onward_requests_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_requests
    ADD CONSTRAINT onward_requests_pkey PRIMARY KEY (thread_id);


--
-- Name: onward_runs onward_runs_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_runs
    ADD CONSTRAINT onward_runs_pkey PRIMARY KEY (thread_id);


--
-- Name: onward_threads onward_threads_pkey; Type: CONSTRAINT; Schema: golden_schema; Owner: -
--

ALTER TABLE ONLY golden_schema.onward_threads
    ADD CONSTRAINT onward_threads_pkey PRIMARY KEY (thread_id);


--
-- Name: onward_api_run_events_thread; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_api_run_events_thread ON golden_schema.onward_api_run_events USING btree (thread_id);


--
-- Name: onward_crons_due; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_crons_due ON golden_schema.onward_crons USING btree (enabled, next_run_date);


--
-- Name: onward_effects_thread; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_effects_thread ON golden_schema.onward_effects USING btree (thread_id, step_id);


--
-- Name: onward_events_attempt; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE UNIQUE INDEX onward_events_attempt ON golden_schema.onward_events USING btree (thread_id, substr(dedupe, (strpos(dedupe, ':'::text) + 1)), kind) WHERE (dedupe IS NOT NULL);


--
-- Name: onward_events_thread; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_events_thread ON golden_schema.onward_events USING btree (thread_id, id);


--
-- Name: onward_events_unkeyed_kind; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_events_unkeyed_kind ON golden_schema.onward_events USING btree (thread_id, kind, id) WHERE (dedupe IS NULL);


--
-- Name: onward_queue_ready; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_queue_ready ON golden_schema.onward_queue USING btree (ready_at);


--
-- Name: onward_runs_created; Type: INDEX; Schema: golden_schema; Owner: -
--

CREATE INDEX onward_runs_created ON golden_schema.onward_runs USING btree (created_at);


--
-- PostgreSQL database dump complete
--

\unrestrict r4LowYwEMPe2u6cz5Sh0L4JbkvWYUfv899oKgepRVjfs6YMEPTpuyoy5pX8oieu

