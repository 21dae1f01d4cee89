-- The TPC-H tables for benches/tpch.sh. The spec's char(n) columns are varchar here: mindlite
-- reads varchar as text, and char(n) compares with padding, so filters on it stay local.
-- Primary keys are added after loading (tpch.sh), then ANALYZE.
drop table if exists lineitem, orders, partsupp, customer, supplier, part, nation, region;

create table region (
    r_regionkey integer not null,
    r_name varchar(25) not null,
    r_comment varchar(152)
);

create table nation (
    n_nationkey integer not null,
    n_name varchar(25) not null,
    n_regionkey integer not null,
    n_comment varchar(152)
);

create table part (
    p_partkey integer not null,
    p_name varchar(55) not null,
    p_mfgr varchar(25) not null,
    p_brand varchar(10) not null,
    p_type varchar(25) not null,
    p_size integer not null,
    p_container varchar(10) not null,
    p_retailprice decimal(15, 2) not null,
    p_comment varchar(23) not null
);

create table supplier (
    s_suppkey integer not null,
    s_name varchar(25) not null,
    s_address varchar(40) not null,
    s_nationkey integer not null,
    s_phone varchar(15) not null,
    s_acctbal decimal(15, 2) not null,
    s_comment varchar(101) not null
);

create table partsupp (
    ps_partkey integer not null,
    ps_suppkey integer not null,
    ps_availqty integer not null,
    ps_supplycost decimal(15, 2) not null,
    ps_comment varchar(199) not null
);

create table customer (
    c_custkey integer not null,
    c_name varchar(25) not null,
    c_address varchar(40) not null,
    c_nationkey integer not null,
    c_phone varchar(15) not null,
    c_acctbal decimal(15, 2) not null,
    c_mktsegment varchar(10) not null,
    c_comment varchar(117) not null
);

create table orders (
    o_orderkey integer not null,
    o_custkey integer not null,
    o_orderstatus varchar(1) not null,
    o_totalprice decimal(15, 2) not null,
    o_orderdate date not null,
    o_orderpriority varchar(15) not null,
    o_clerk varchar(15) not null,
    o_shippriority integer not null,
    o_comment varchar(79) not null
);

create table lineitem (
    l_orderkey integer not null,
    l_partkey integer not null,
    l_suppkey integer not null,
    l_linenumber integer not null,
    l_quantity decimal(15, 2) not null,
    l_extendedprice decimal(15, 2) not null,
    l_discount decimal(15, 2) not null,
    l_tax decimal(15, 2) not null,
    l_returnflag varchar(1) not null,
    l_linestatus varchar(1) not null,
    l_shipdate date not null,
    l_commitdate date not null,
    l_receiptdate date not null,
    l_shipinstruct varchar(25) not null,
    l_shipmode varchar(10) not null,
    l_comment varchar(44) not null
);
